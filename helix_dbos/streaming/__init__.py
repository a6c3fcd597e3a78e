"""Stream chunks: durable in `helix.stream_chunks`, live through LISTEN/NOTIFY."""

from helix_dbos.streaming.chunks import CHUNK_TYPES, TERMINAL_CHUNK_TYPES, StreamChunk

__all__ = ["CHUNK_TYPES", "TERMINAL_CHUNK_TYPES", "StreamChunk"]
