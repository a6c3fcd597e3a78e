"""The memory store's errors: each says what to do about it."""

from __future__ import annotations

from helix_dbos.errors import HelixError, InvalidInputError

PGVECTOR_INSTALL = (
    "install pgvector on the PostgreSQL server (Debian/Ubuntu: `apt install "
    "postgresql-<version>-pgvector`; others: https://github.com/pgvector/pgvector#installation), "
    "then restart helix: it runs `CREATE EXTENSION vector` and adds the embedding column "
    "itself, and `process_unembedded()` embeds the memories saved meanwhile"
)


class VectorSearchUnavailableError(HelixError, RuntimeError):
    """Vector search was asked of a database without the pgvector extension."""

    def __init__(self, detail: str = "") -> None:
        why = f" ({detail})" if detail else ""
        super().__init__(
            "Vector search needs the PostgreSQL extension 'vector' (pgvector), which this "
            f"database does not have{why}. Full-text search (mode='text') works without it; "
            f"to search by vector, {PGVECTOR_INSTALL}."
        )


class EmbeddingError(HelixError, RuntimeError):
    """The embedder failed. `retryable` (network, rate limit, 5xx): the memory stays
    `pending` for `process_unembedded()`; otherwise it is marked `failed`."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class EmbeddingDimensionError(EmbeddingError, ValueError):
    """An embedding whose length is not the dimension the store was set up with."""

    def __init__(self, model: str, expected: int, got: int) -> None:
        super().__init__(
            f"Embedder '{model}' returned a vector of dimension {got}, but the memory store "
            f"uses dimension {expected}: configure the embedder's `dimension` to match what "
            "the model returns (memories of another dimension are never compared)",
            retryable=False,
        )
        self.expected = expected
        self.got = got


class MemoryNotConfiguredError(HelixError, RuntimeError):
    """A memory tool or recall ran in a process without a memory manager."""


class InvalidMemoryError(InvalidInputError):
    """Memory text that is empty (or only whitespace) or longer than
    `MAX_MEMORY_CHARS`: refused before anything is written (a 422 over HTTP; as the
    `__remember__` tool, an error result the model can act on)."""
