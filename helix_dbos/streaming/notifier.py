"""One LISTEN connection per process wakes every local stream reader.

Writers `pg_notify('helix_chunks', session_id)` once the chunks they added have
committed (the hot paths through `runtime/process/wake_ups.py`, just after their
commit; rarer writes in the transaction itself), so a reader is woken when new rows
are visible;
the end of a run also sends `pg_notify('helix_run_end', run_id)`, so a caller
waiting for a result is woken once, not at every chunk. Waiters still re-check
every few seconds, which covers a dropped listener connection; when the listener
connects again (a database restart), every waiter is woken to look at once, and
`on_lost` learns when the connection was lost (the statement pool retires the
connections opened before, which died with it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable

import psycopg

logger = logging.getLogger("helix_dbos")

CHANNEL = "helix_chunks"
RUN_END_CHANNEL = "helix_run_end"


# When `on_back` runs after the listener connected again (seconds after, in turn).
BACK_DELAYS_SECONDS = (0.0, 2.0, 3.0)


def run_end_key(run_id: str) -> str:
    """The key `wait`/`version` use for a run's end (session ids are the chunk keys)."""
    return f"{RUN_END_CHANNEL}:{run_id}"


class ChunkNotifier:
    """`conninfo` None: no LISTEN at all (behind a transaction pooler, with no direct URL
    to listen on, a notification would never arrive); waiters then re-check every
    `poll_seconds` at most."""

    def __init__(
        self,
        conninfo: str | None,
        on_lost: Callable[[float], None] | None = None,
        on_back: Callable[[], Awaitable[None]] | None = None,
        poll_seconds: float | None = None,
    ) -> None:
        self._conninfo = conninfo
        self._poll_seconds = poll_seconds
        self._on_lost = on_lost
        self._on_back = on_back
        self._back: set[asyncio.Task[None]] = set()
        self._versions: defaultdict[str, int] = defaultdict(int)
        self._conditions: dict[str, asyncio.Condition] = {}
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()

    def version(self, session_id: str) -> int:
        return self._versions[session_id]

    async def start(self) -> None:
        if self._conninfo is None:
            self._ready.set()
            return
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._listen())
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._ready.wait(), timeout=5)

    async def wait(self, session_id: str, seen_version: int, timeout: float) -> None:
        """Return when the session got a notification after `seen_version`, or after `timeout`."""
        await self.start()
        if self._poll_seconds is not None:
            timeout = min(timeout, self._poll_seconds)
        condition = self._conditions.setdefault(session_id, asyncio.Condition())
        async with condition:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(
                    condition.wait_for(lambda: self._versions[session_id] > seen_version), timeout
                )

    async def stop(self) -> None:
        for task in list(self._back):
            task.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None

    async def _listen(self) -> None:
        assert self._conninfo is not None
        delay = 0.5
        lost = False
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self._conninfo, autocommit=True, fallback_application_name="helix-listen"
                ) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    await conn.execute(f"LISTEN {RUN_END_CHANNEL}")
                    self._ready.set()
                    delay = 0.5
                    if lost:  # notifications sent meanwhile are gone: everyone looks now
                        lost = False
                        for key in list(self._conditions):
                            await self._wake(key)
                        self._call_back()
                    async for note in conn.notifies():
                        key = note.payload
                        if note.channel == RUN_END_CHANNEL:
                            key = run_end_key(key)
                        await self._wake(key)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database restarted: readers keep polling meanwhile
                logger.warning("helix stream listener lost its connection (%s); reconnecting", exc)
                if not lost and self._on_lost is not None:
                    self._on_lost(time.monotonic())
                lost = True
                self._ready.set()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)

    def _call_back(self) -> None:
        """`on_back`, now and twice more: other listeners of the process (DBOS's) may
        take a moment longer to connect again, and miss what is sent until they do."""
        if self._on_back is None:
            return
        on_back = self._on_back

        async def call() -> None:
            for delay in BACK_DELAYS_SECONDS:
                await asyncio.sleep(delay)
                try:
                    await on_back()
                except Exception as exc:
                    logger.warning("helix could not re-check waiting messages: %s", exc)

        task = asyncio.get_running_loop().create_task(call())
        self._back.add(task)
        task.add_done_callback(self._back.discard)

    async def _wake(self, session_id: str) -> None:
        self._versions[session_id] += 1
        condition = self._conditions.get(session_id)
        if condition is not None:
            async with condition:
                condition.notify_all()
