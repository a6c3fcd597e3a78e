"""When a memory's embedding is computed (seed 002's Embedding Executors).

The memory row is committed first either way, so full-text search finds it at once
and a crash never loses it; a memory whose embedding never happened stays `pending`
until `MemoryManager.process_unembedded()`.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from dbos import DBOS

from helix_dbos.memory.types import EmbedOutcome
from helix_dbos.runtime.process.event_loop import on_target_loop

EmbedJob = Callable[[list[str]], Coroutine[Any, Any, EmbedOutcome]]


def in_workflow_code() -> bool:
    """Inside a DBOS workflow but not inside one of its steps: work must be a step."""
    return DBOS.workflow_id is not None and DBOS.step_status is None


class EmbeddingExecutor(Protocol):
    async def submit(self, job: EmbedJob, memory_ids: list[str]) -> EmbedOutcome | None:
        """Embed these memories now (their outcome) or later (None)."""
        ...

    async def shutdown(self) -> None: ...


class InlineEmbeddingExecutor:
    """Embeds before `save` returns. Called from workflow code (an agent's
    `__remember__`), the embedding is a DBOS step of its own (`helix.memory.embed`):
    a crash after it never embeds again, a crash before it embeds on recovery."""

    async def submit(self, job: EmbedJob, memory_ids: list[str]) -> EmbedOutcome:
        if in_workflow_code():
            return await DBOS.run_step_async({"name": "helix.memory.embed"}, job, memory_ids)
        return await job(memory_ids)

    async def shutdown(self) -> None:
        return None


class BackgroundEmbeddingExecutor:
    """Embeds after `save` returned, at most `max_concurrency` batches at a time.
    `shutdown()` waits for every batch under way (a drain). A process that dies first
    leaves those memories `pending`, for `process_unembedded()`."""

    def __init__(self, max_concurrency: int = 4) -> None:
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        self.max_concurrency = max_concurrency
        self._slots: asyncio.Semaphore | None = None
        self._tasks: set[asyncio.Task[EmbedOutcome]] = set()
        self._closed = False

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    async def submit(self, job: EmbedJob, memory_ids: list[str]) -> None:
        if self._closed:
            raise RuntimeError("BackgroundEmbeddingExecutor is shut down")
        await on_target_loop(lambda: self._start(job, memory_ids))

    async def _start(self, job: EmbedJob, memory_ids: list[str]) -> None:
        # A fresh context: the batch is not part of the caller's workflow or step.
        task = contextvars.Context().run(
            asyncio.get_running_loop().create_task, self._run(job, memory_ids)
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, job: EmbedJob, memory_ids: list[str]) -> EmbedOutcome:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_concurrency)
        async with self._slots:
            return await job(memory_ids)

    async def shutdown(self) -> None:
        """Refuse new work and wait for the batches under way."""
        self._closed = True
        await on_target_loop(self._drain)

    async def _drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
