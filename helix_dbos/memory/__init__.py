"""Long-term memory (issue 36): memories saved to `helix.memories`, full-text
searchable at once, vector-searchable (pgvector) once embedded. See docs/memory.md.

The tools `__remember__`/`__recall__` (`helix_dbos.memory.tools`) register when an agent
first names them, after the Hyphen built-ins."""

from helix_dbos.memory.embedders import Embedder, HashingEmbedder
from helix_dbos.memory.errors import (
    EmbeddingDimensionError,
    EmbeddingError,
    MemoryNotConfiguredError,
    VectorSearchUnavailableError,
)
from helix_dbos.memory.executors import (
    BackgroundEmbeddingExecutor,
    EmbeddingExecutor,
    InlineEmbeddingExecutor,
)
from helix_dbos.memory.manager import MemoryManager, current_memory, install_memory
from helix_dbos.memory.recall import recall_hooks
from helix_dbos.memory.types import EmbedOutcome, Memory, MemoryHit, SearchMode, VectorSupport

__all__ = [
    "BackgroundEmbeddingExecutor",
    "EmbedOutcome",
    "Embedder",
    "EmbeddingDimensionError",
    "EmbeddingError",
    "EmbeddingExecutor",
    "HashingEmbedder",
    "InlineEmbeddingExecutor",
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
