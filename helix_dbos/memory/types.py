"""What the memory store hands out: memories, search hits, and the store's abilities."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

SearchMode = Literal["hybrid", "vector", "text"]
EmbeddingStatus = Literal["pending", "complete", "failed"]


@dataclass(frozen=True)
class Memory:
    """One saved memory. `embedding_status` is `pending` until its embedding is stored
    (full-text search finds it from the start), `failed` after a permanent error."""

    memory_id: str
    resource_id: str
    text: str
    session_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    embedding_status: EmbeddingStatus = "pending"
    embedding_model: str | None = None
    embedding_dimension: int | None = None
    embedding_error: str | None = None
    created_at: datetime | None = None
    expires_at: datetime | None = None


@dataclass(frozen=True)
class MemoryHit:
    """A search result: the memory, its fused score, and its rank in each list that
    found it (1 is best; None when that list did not)."""

    memory: Memory
    score: float
    text_rank: int | None = None
    vector_rank: int | None = None


@dataclass(frozen=True)
class VectorSupport:
    """Whether this database can store and search embeddings, and why not."""

    available: bool
    schema: str | None = None  # where the `vector` type lives
    version: str | None = None
    installable: bool = False  # the server has the package, the database lacks the extension


@dataclass(frozen=True)
class EmbedOutcome:
    """What one embedding pass did (`process_unembedded` returns the sum)."""

    embedded: int = 0
    failed: int = 0
    pending: int = 0  # left pending: the embedder was unreachable, try again later

    def __add__(self, other: EmbedOutcome) -> EmbedOutcome:
        return EmbedOutcome(
            self.embedded + other.embedded,
            self.failed + other.failed,
            self.pending + other.pending,
        )
