"""Long-term memory (issue 36): memories saved to `helix.memories`, full-text
searchable at once, vector-searchable (pgvector) once embedded. See docs/memory.md.

Names load on first use (PEP 562), so a module that needs only the SQL (`store`, for
`helix.checkpoints.prune`) does not load the manager and DBOS. The tools `__remember__`/`__recall__`
(`helix_dbos.memory.tools`) register when an agent first names them, after the Hyphen
built-ins."""

from __future__ import annotations

from typing import TYPE_CHECKING

from helix_dbos.lazy_names import lazy_getattr

if TYPE_CHECKING:
    from helix_dbos.memory.embedders import Embedder, HashingEmbedder
    from helix_dbos.memory.executors import (
        BackgroundEmbeddingExecutor,
        EmbeddingExecutor,
        InlineEmbeddingExecutor,
    )
    from helix_dbos.memory.manager import (
        MAX_MEMORY_CHARS,
        MemoryManager,
        current_memory,
        install_memory,
    )
    from helix_dbos.memory.memory_errors import (
        EmbeddingDimensionError,
        EmbeddingError,
        InvalidMemoryError,
        MemoryNotConfiguredError,
        VectorSearchUnavailableError,
    )
    from helix_dbos.memory.recall import recall_hooks
    from helix_dbos.memory.types import (
        EmbedOutcome,
        Memory,
        MemoryHit,
        SearchMode,
        VectorSupport,
    )

_EXPORTS: dict[str, str] = {
    **dict.fromkeys(["Embedder", "HashingEmbedder"], "helix_dbos.memory.embedders"),
    **dict.fromkeys(
        [
            "EmbeddingDimensionError",
            "EmbeddingError",
            "InvalidMemoryError",
            "MemoryNotConfiguredError",
            "VectorSearchUnavailableError",
        ],
        "helix_dbos.memory.memory_errors",
    ),
    **dict.fromkeys(
        ["BackgroundEmbeddingExecutor", "EmbeddingExecutor", "InlineEmbeddingExecutor"],
        "helix_dbos.memory.executors",
    ),
    **dict.fromkeys(
        ["MAX_MEMORY_CHARS", "MemoryManager", "current_memory", "install_memory"],
        "helix_dbos.memory.manager",
    ),
    "recall_hooks": "helix_dbos.memory.recall",
    **dict.fromkeys(
        ["EmbedOutcome", "Memory", "MemoryHit", "SearchMode", "VectorSupport"],
        "helix_dbos.memory.types",
    ),
}

__all__ = [
    "MAX_MEMORY_CHARS",
    "BackgroundEmbeddingExecutor",
    "EmbedOutcome",
    "Embedder",
    "EmbeddingDimensionError",
    "EmbeddingError",
    "EmbeddingExecutor",
    "HashingEmbedder",
    "InlineEmbeddingExecutor",
    "InvalidMemoryError",
    "Memory",
    "MemoryHit",
    "MemoryManager",
    "MemoryNotConfiguredError",
    "SearchMode",
    "VectorSearchUnavailableError",
    "VectorSupport",
    "current_memory",
    "install_memory",
    "recall_hooks",
]


__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())
