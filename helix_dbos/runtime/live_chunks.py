"""Stream chunks written the moment they happen, outside a step's rows.

Text deltas, thinking, and the start of a call that waits or runs long are
shown live; each is keyed, so a replay writes nothing twice. They skip their
own WAL flush: a PostgreSQL crash can lose the last of them, never a message,
a state change, a usage row or a `tool_end`.
"""

from __future__ import annotations

import time
import uuid

from helix_dbos.definitions.agent import Agent
from helix_dbos.orchestration.types import ToolCall
from helix_dbos.runtime.context import Runtime
from helix_dbos.runtime.step_types import ChunkRecord
from helix_dbos.store import repository as repo

# A tool that runs longer than this has its `tool_start` written live by its step;
# a faster one's goes with the step's rows, costing no write of its own.
LIVE_TOOL_START_SECONDS = 0.1


async def write_chunks(
    rt: Runtime,
    session_id: str,
    run_id: str,
    agent_name: str,
    step: int,
    chunks: list[ChunkRecord],
) -> None:
    """Live chunks, committed at once on their own connection."""
    if chunks:
        async with rt.statements() as conn:
            await repo.insert_chunks(
                conn, session_id, run_id, agent_name, step, chunks, durable=False
            )


def runs_at_once(agent: Agent, call: ToolCall) -> bool:
    """A call that runs in its own tool step without waiting for anyone (see
    `LIVE_TOOL_START_SECONDS` for when its `tool_start` is written)."""
    tool = agent.tool(call.name)
    return tool is None or not (tool.waits_for_answer or tool.runs_in_workflow)


def tool_start_chunk(run_id: str, step: int, call: ToolCall) -> ChunkRecord:
    return ChunkRecord(
        f"{run_id}:{step}:{call.id}:start",
        "tool_start",
        {"tool_call_id": call.id, "tool_name": call.name, "arguments": call.arguments},
    )


class DeltaWriter:
    """Writes text deltas as stream chunks, coalesced to at most one write per interval."""

    def __init__(
        self,
        rt: Runtime,
        session_id: str,
        run_id: str,
        agent_name: str,
        step: int,
        interval: float = 0.05,
    ) -> None:
        self._rt, self._session_id, self._run_id = rt, session_id, run_id
        self._agent_name, self._step, self._interval = agent_name, step, interval
        self._attempt = uuid.uuid4().hex[:8]  # a retried call streams again, under new keys
        self._buffer: list[str] = []
        self._last = 0.0
        self._count = 0

    async def __call__(self, delta: str) -> None:
        self._buffer.append(delta)
        if time.monotonic() - self._last >= self._interval:
            await self.flush()

    async def flush(self) -> None:
        if not self._buffer:
            return
        text = "".join(self._buffer)
        self._buffer.clear()
        self._last = time.monotonic()
        key = f"{self._run_id}:{self._step}:delta:{self._attempt}:{self._count}"
        self._count += 1
        await write_chunks(
            self._rt,
            self._session_id,
            self._run_id,
            self._agent_name,
            self._step,
            [ChunkRecord(key, "text_delta", {"delta": text})],
        )
