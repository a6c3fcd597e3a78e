"""Waiting for runs: a run's result, its end, and a session's stream of chunks.

Waiters sleep on LISTEN/NOTIFY (one listener per process, `ChunkNotifier`); a poll is
only the safety net. A run started and running in this process is awaited directly.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator
from typing import Any

from dbos import DBOS

from helix_dbos.errors import RunNotFoundError
from helix_dbos.runtime.dbos import dbos_internals
from helix_dbos.runtime.process.event_loop import on_target_loop
from helix_dbos.runtime.sessions.session_reads import SessionReads
from helix_dbos.runtime.starts.run_starts import DBOS_TERMINAL, RunStarts
from helix_dbos.runtime.steps.results import TERMINAL_STATUSES, AgentResult, RunInfo, run_result
from helix_dbos.store import repository as repo
from helix_dbos.store import run_bounds
from helix_dbos.store.database import libpq_url
from helix_dbos.store.run_bounds import RunOutcome
from helix_dbos.streaming.chunks import TERMINAL_CHUNK_TYPES, StreamChunk
from helix_dbos.streaming.notifier import ChunkNotifier, run_end_key
from helix_dbos.streaming.stream_reads import SharedChunkReads


class RunWaits:
    """Results, run ends and streams, for callers in any process."""

    def __init__(
        self,
        reads: SessionReads,
        starts: RunStarts,
        listen_url: str | None,
        poll_seconds: float | None = None,
    ) -> None:
        """`listen_url`: where to LISTEN (None: nowhere, waiters re-check every
        `poll_seconds`, behind a transaction pooler with no direct URL)."""
        self.reads = reads
        self.runtime = reads.runtime
        self.starts = starts
        self.listen_url = listen_url
        self.poll_seconds = poll_seconds
        self.notifier_started: ChunkNotifier | None = None
        self._chunk_reads = SharedChunkReads(self._load_chunks)

    async def notifier(self) -> ChunkNotifier:
        """The process's LISTEN connection, started on first use (on the target loop)."""
        if self.notifier_started is None:
            self.notifier_started = ChunkNotifier(
                None if self.listen_url is None else libpq_url(self.listen_url),
                on_lost=self.runtime.statement_pool.connections_lost,
                on_back=lambda: asyncio.to_thread(dbos_internals.recheck_message_waiters),
                poll_seconds=self.poll_seconds,
            )
            await self.notifier_started.start()
        return self.notifier_started

    async def stream(
        self,
        session_id: str,
        *,
        after_seq: int,
        run_id: str | None,
        follow: bool,
        poll_seconds: float,
    ) -> AsyncIterator[StreamChunk]:
        await self.reads.get_session(session_id)
        notifier = await on_target_loop(self.notifier)
        last = after_seq
        while True:
            seen = notifier.version(session_id)
            rows = await on_target_loop(
                functools.partial(self._chunk_reads.load, session_id, last, run_id)
            )
            ended = False
            for chunk in rows:
                last = chunk.seq
                yield chunk
                if chunk.run_id == run_id and chunk.type in TERMINAL_CHUNK_TYPES:
                    ended = True
            if ended or not follow:
                return
            if len(rows) >= 500:
                continue
            # A run's stream ends on its terminal chunk, so a wake-up that brought rows
            # needs no status query; the check only matters when nothing new arrived.
            fresh = bool(rows) and run_id is not None
            if not fresh and await self._stream_finished(session_id, run_id):
                if not await self.reads.read(
                    repo.load_chunks, session_id, after_seq=last, run_id=run_id
                ):
                    return
                continue
            await on_target_loop(functools.partial(notifier.wait, session_id, seen, poll_seconds))

    async def wait_for_run_end(self, session_id: str, run_id: str, poll_seconds: float) -> RunInfo:
        outcome = await self._wait_for_outcome(session_id, run_id, poll_seconds)
        return RunInfo(**outcome.run.__dict__)

    async def wait_for_result(
        self, session_id: str, run_id: str, workflow_id: str, poll_seconds: float
    ) -> AgentResult:
        task = self.starts.local_runs.get(workflow_id)
        if task is not None:

            async def ended() -> Any:
                return await asyncio.shield(task)

            try:
                result = await on_target_loop(ended)
                if isinstance(result, AgentResult):  # usage included: the last write read it
                    return result.model_copy()  # each caller its own (the task's is shared)
            except asyncio.CancelledError:
                if not task.cancelled():
                    raise  # this caller was cancelled
                # the run's task was: a wait for a human parked it (`wait_parking.py`)
            except Exception:  # crashed: read the row
                pass
        return run_result(await self._wait_for_outcome(session_id, run_id, poll_seconds))

    async def _wait_for_outcome(
        self, session_id: str, run_id: str, poll_seconds: float
    ) -> RunOutcome:
        """Sleep on the run's end notification (not on every chunk, so a waiting caller
        costs the run nothing while it works) until its row is final.

        Only a wait that no notification ended asks DBOS whether the workflow ended
        without closing the run (or never started): the first after a second at most,
        then one every `poll_seconds`.
        """
        notifier = await on_target_loop(self.notifier)
        key = run_end_key(run_id)
        timeout, woken = min(poll_seconds, 1.0), True
        while True:
            seen = notifier.version(key)
            outcome = await self.reads.read(run_bounds.run_outcome, run_id)
            if outcome is None:
                raise RunNotFoundError(run_id)
            if outcome.run.status in TERMINAL_STATUSES:
                await self._workflow_settled(outcome.run.workflow_id)
                return outcome
            if not woken:
                status = await DBOS.get_workflow_status_async(outcome.run.workflow_id)
                ended = status is None or status.status in DBOS_TERMINAL
                if ended and await on_target_loop(lambda: self.starts.close_if_stale(run_id)):
                    continue  # its workflow ended (or never started) without closing it
                timeout = poll_seconds
            await on_target_loop(functools.partial(notifier.wait, key, seen, timeout))
            woken = notifier.version(key) > seen

    async def _workflow_settled(self, workflow_id: str, *, timeout: float = 1.0) -> None:
        """Wait for DBOS to record the end of a workflow whose run's row has ended.

        The run's last write wakes its waiters with its commit, and the workflow's end
        commits a moment later: a caller then finds DBOS's status ended too, as the local
        caller (who awaits the workflow's task) always does. The row stays the result's
        source: a workflow that does not end within `timeout` (its end hook still
        running, say) is not waited for any longer.
        """
        deadline, pause = time.monotonic() + timeout, 0.002
        while True:
            status = await on_target_loop(lambda: DBOS.get_workflow_status_async(workflow_id))
            if status is None or status.status in DBOS_TERMINAL:
                return
            if time.monotonic() >= deadline:
                return
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.1)

    async def _load_chunks(
        self, session_id: str, after_seq: int, run_id: str | None
    ) -> list[StreamChunk]:
        rows = await self.runtime.read(
            functools.partial(repo.load_chunks, after_seq=after_seq, run_id=run_id), session_id
        )
        return [StreamChunk.from_row(row) for row in rows]

    async def _stream_finished(self, session_id: str, run_id: str | None) -> bool:
        if run_id is not None:
            return (await self.reads.get_run(run_id)).status in TERMINAL_STATUSES
        return await self.reads.read(repo.get_live_run, session_id) is None
