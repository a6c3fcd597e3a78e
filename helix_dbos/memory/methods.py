"""`HelixDBOS`'s long-term memory (issue 36): the manager agents' `__remember__`,
`__recall__` and recall hooks use, on helix's database."""

from __future__ import annotations

from helix_dbos.memory.embedders import Embedder
from helix_dbos.memory.executors import EmbeddingExecutor
from helix_dbos.memory.manager import MemoryManager, current_memory, install_memory
from helix_dbos.runtime.process.process_runtime import Runtime


class MemoryMethods:
    """A mixin of `HelixDBOS`: the process's memory manager, and installing one."""

    runtime: Runtime

    @property
    def memory(self) -> MemoryManager:
        """The memory manager agents' `__remember__`/`__recall__` and recall hooks use."""
        return current_memory()

    def use_memory(
        self, *, embedder: Embedder | None = None, executor: EmbeddingExecutor | None = None
    ) -> MemoryManager:
        """Install a memory manager with this embedder and embedding executor."""
        return install_memory(
            MemoryManager(self.runtime.engine, embedder=embedder, executor=executor)
        )
