"""Stream chunks written the moment they happen, outside a step's rows.

Text deltas, thinking, and the start of a call that waits or runs long are
shown live; each is keyed, so a replay writes nothing twice. Each commit waits
for its WAL flush, so a chunk a reader saw survives a PostgreSQL crash and its
seq is never handed to another chunk (a reader resuming after it misses
nothing); each carries the execution's owner token, so a fenced execution's
late chunk does not land (issue 46).
"""

from __future__ import annotations

import logging
import time
import uuid

from helix_dbos.definitions.agent import Agent
from helix_dbos.orchestration.types import ToolCall
from helix_dbos.runtime.dbos.dbos_internals import execution_owner
from helix_dbos.runtime.process.process_runtime import Runtime
from helix_dbos.runtime.steps.step_types import ChunkRecord
from helix_dbos.store import repository as repo
from helix_dbos.streaming.notifier import CHANNEL

logger = logging.getLogger("helix_dbos")

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
    *,
    wait: bool = True,
) -> None:
    """Live chunks, committed at once on their own connection (inside a run and with
    `wait`, a database outage is waited out: they are keyed, so one that landed is not
    written twice)."""
    if chunks:
        owner = execution_owner()
        await rt.on_connection(
            "a live chunk",
            lambda conn: repo.insert_chunks(
                conn, session_id, run_id, agent_name, step, chunks, owner=owner, notify=False
            ),
            wait=wait,
        )
        rt.wake_ups.send_soon(CHANNEL, session_id)  # after the commit (see `WakeUps`)


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
    """Writes text deltas as stream chunks, coalesced to at most one write per interval.

    Called by the provider's adapter while the model streams: a database error there
    must not look like the model's (the adapter would fail the call), so a write that
    fails keeps its text for the next one, and only the last flush, after the call,
    waits for the database."""

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
        self._owner = execution_owner()  # a fenced execution's deltas do not land
        self._buffer: list[str] = []
        self._pending: ChunkRecord | None = None  # a delta whose write failed
        self._last = 0.0
        self._count = 0

    async def __call__(self, delta: str) -> None:
        self._buffer.append(delta)
        if time.monotonic() - self._last >= self._interval:
            self._last = time.monotonic()
            try:
                await self._write(wait=False)
            except Exception as exc:  # kept for the next write; never the model's error
                logger.debug("helix could not write a text delta yet: %s", exc)

    async def flush(self) -> None:
        """The rest of the text, once the model answered (waiting out an outage)."""
        await self._write(wait=True)
        if self._buffer:  # what came while an earlier delta was retried
            await self._write(wait=True)

    async def _write(self, *, wait: bool) -> None:
        """The pending delta (one that failed goes again under its own key and text, so
        if it did land, its repeat is a no-op), else the buffered text as a new one."""
        if self._pending is None:
            if not self._buffer:
                return
            key = f"{self._run_id}:{self._step}:delta:{self._attempt}:{self._count}"
            self._pending = ChunkRecord(key, "text_delta", {"delta": "".join(self._buffer)})
            self._buffer.clear()
            self._count += 1
        chunk = self._pending
        await self._rt.on_connection(
            "a text delta",
            lambda conn: repo.insert_chunks(
                conn,
                self._session_id,
                self._run_id,
                self._agent_name,
                self._step,
                [chunk],
                owner=self._owner,
                notify=False,
            ),
            wait=wait,
        )
        self._pending = None
        self._rt.wake_ups.send_soon(CHANNEL, self._session_id)
