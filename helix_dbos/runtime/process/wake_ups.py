"""Wake-ups for stream readers, sent after the write they announce, not inside it.

PostgreSQL serialises the commits of every transaction that called NOTIFY, cluster-wide:
such a commit takes a lock on the database (`pg_database`, object 0) and holds it
through its WAL flush. With a NOTIFY in each step's write, the steps of two worker
processes committed one at a time, and a second process gained little (issue 48).
So a step's write commits without one, and this sends the wake-up just after, in a
statement of its own that does not wait for its WAL flush (the lock is then held for
microseconds): wake-ups queued while one is in flight go out together, one per key.

A wake-up only tells readers to look: a reader that misses one (a crash between the
write and it, a lost connection) finds the rows at its next re-check, as after a
dropped LISTEN connection (`streaming/notifier.py`).
"""

from __future__ import annotations

import asyncio
import json
import logging

from sqlalchemy import text

from helix_dbos.store.statement_pool import StatementPool

logger = logging.getLogger("helix_dbos")

# One statement for a batch: (channel, payload) pairs, committed without a WAL flush.
_SEND = text(
    "SELECT count(pg_notify(w.channel, w.payload)), "
    "max(set_config('synchronous_commit', 'off', true)) FROM "
    "json_to_recordset(CAST(:rows AS json)) AS w(channel text, payload text)"
)


class WakeUps:
    """The process's queue of NOTIFYs to send (`send_soon`), drained by one task at a time."""

    def __init__(self, pool: StatementPool) -> None:
        self._pool = pool
        self._queued: dict[tuple[str, str], None] = {}  # in order, each pair once
        self._sending: asyncio.Task[None] | None = None

    def send_soon(self, channel: str, payload: str) -> None:
        """Queue a NOTIFY; it goes out with the next batch (the caller does not wait)."""
        self._queued[(channel, payload)] = None
        if self._sending is None or self._sending.done():
            self._sending = asyncio.get_running_loop().create_task(self._drain())

    async def send(self, channel: str, payload: str) -> None:
        """A NOTIFY sent now, waited for (errors are logged, not raised)."""
        await self._send_batch([(channel, payload)])

    async def _drain(self) -> None:
        while self._queued:
            batch = list(self._queued)
            self._queued.clear()
            await self._send_batch(batch)

    async def _send_batch(self, batch: list[tuple[str, str]]) -> None:
        rows = json.dumps([{"channel": c, "payload": p} for c, p in batch])
        try:
            async with self._pool.connection() as conn:
                await conn.execute(_SEND, {"rows": rows})
        except Exception as exc:  # a reader's next re-check covers a lost wake-up
            logger.debug("helix could not send %d wake-up(s): %s", len(batch), exc)

    async def close(self) -> None:
        """Send what is queued, then stop (a process shutting down)."""
        task = self._sending
        if task is not None and not task.done():
            await asyncio.gather(task, return_exceptions=True)
