"""A step's head written once its tools run slowly, holding nothing once it is done.

A run waiting for a human keeps its step's frames for hours; a finished `asyncio.Task`
kept there would hold its coroutine and a context copy (about 0.8 kB a waiting run).
`SlowHead` lets go of its task as soon as the task ends."""

from __future__ import annotations

import asyncio

from helix_dbos.runtime.dbos.dbos_internals import WorkflowNotOwnedError
from helix_dbos.runtime.process.process_runtime import Runtime, logger
from helix_dbos.runtime.steps.commit import StepCommit, write_head
from helix_dbos.runtime.steps.live_chunks import LIVE_TOOL_START_SECONDS


class SlowHead:
    """Once a step's tools have run for `LIVE_TOOL_START_SECONDS`, write its head (the
    model's message, its LLM usage), so a slow or aborted step still shows what the model
    asked for. Live and keyed, like a slow tool's `tool_start`; durable before it is
    visible, like every step write (`write_step_rows`)."""

    def __init__(self, rt: Runtime, commit: StepCommit) -> None:
        task = asyncio.get_running_loop().create_task(_write_head_if_slow(rt, commit))
        task.add_done_callback(self._forget)
        self._task: asyncio.Task[None] | None = task

    def _forget(self, _: asyncio.Task[None]) -> None:
        self._task = None  # it catches its own errors: no exception left to retrieve

    async def stop(self) -> None:
        """Cancel the write if it has not ended, and wait for it to end."""
        task = self._task
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def _write_head_if_slow(rt: Runtime, commit: StepCommit) -> None:
    await asyncio.sleep(LIVE_TOOL_START_SECONDS)
    try:
        async with rt.statements() as conn:
            await write_head(conn, commit)
    except WorkflowNotOwnedError:
        pass  # an abort or another worker took the run: no head of this execution's
    except Exception as exc:
        logger.warning("helix could not write the head of step %d: %s", commit.step, exc)
