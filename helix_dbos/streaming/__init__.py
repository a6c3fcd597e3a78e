"""Stream chunks: durable in `helix.stream_chunks`, live through LISTEN/NOTIFY."""

from helix_dbos.streaming.chunks import (
    CHUNK_TYPES,
    PAYLOAD_MODELS,
    TERMINAL_CHUNK_TYPES,
    ChunkPayload,
    StreamChunk,
)

__all__ = ["CHUNK_TYPES", "PAYLOAD_MODELS", "TERMINAL_CHUNK_TYPES", "ChunkPayload", "StreamChunk"]
