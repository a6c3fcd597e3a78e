"""Connection pools that keep what a busy process uses and close it once idle.

SQLAlchemy's `QueuePool` either keeps `pool_size` connections for good or closes every
connection beyond them the moment it is given back. Helix kept 3 in DBOS's pool (an
idle worker holds few connections), so under load most of DBOS's system-database calls
opened and closed a connection (a PostgreSQL backend each): at 200 concurrent runs,
about two per agent step, more than half of PostgreSQL's CPU per step
(benchmarks/bench_saturation.py). Helix's own transaction pool kept one, with the same
effect while many runs resumed at once (benchmarks/bench_waiting_runs.py). These pools
hold up to `pool_size` connections while they are used, hand out the most recently
returned first, and close those beyond `keep` once unused for `idle_seconds`, so an
idle worker still comes down to `keep`.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy.pool import AsyncAdaptedQueuePool, ConnectionPoolEntry, QueuePool


class _IdleTrim(QueuePool):
    keep = 3  # connections never closed for being idle
    idle_seconds = 10.0
    trim_every_seconds = 1.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["use_lifo"] = True  # the busy set is reused; the rest ages and is closed
        super().__init__(*args, **kwargs)
        self._returned: dict[ConnectionPoolEntry, float] = {}
        self._next_trim = 0.0

    def _do_return_conn(self, record: ConnectionPoolEntry) -> None:
        now = time.monotonic()
        self._returned[record] = now
        super()._do_return_conn(record)
        if now >= self._next_trim:  # DBOS's own threads give connections back every second
            self._next_trim = now + self.trim_every_seconds
            self._trim(now)

    def _trim(self, now: float) -> None:
        """Close the connections beyond `keep` that nobody took for `idle_seconds`."""
        for record in self._take_stale(now):
            self._returned.pop(record, None)
            try:
                record.close()
            finally:
                self._dec_overflow()

    def _take_stale(self, now: float) -> list[ConnectionPoolEntry]:
        raise NotImplementedError

    def _stale_prefix(self, entries: Any, now: float) -> int:
        """How many entries at the front of `entries` (oldest returned first, as LIFO
        leaves them) are beyond `keep` and unused for `idle_seconds`."""
        count = 0
        while len(entries) - count > self.keep:
            if now - self._returned.get(entries[count], now) < self.idle_seconds:
                break
            count += 1
        return count


class IdleTrimmedQueuePool(_IdleTrim):
    """DBOS's system-database pool (threads)."""

    def _take_stale(self, now: float) -> list[ConnectionPoolEntry]:
        queue: Any = self._pool  # sqlalchemy.util.queue.Queue: a deque under a mutex
        with queue.mutex:
            entries = queue.queue
            return [entries.popleft() for _ in range(self._stale_prefix(entries, now))]


class IdleTrimmedAsyncQueuePool(_IdleTrim, AsyncAdaptedQueuePool):
    """Helix's transaction pool (one event loop)."""

    keep = 1

    def _take_stale(self, now: float) -> list[ConnectionPoolEntry]:
        # sqlalchemy.util.queue.AsyncAdaptedQueue over an asyncio.LifoQueue, whose list
        # grows at its end; used on one loop, so no lock
        entries: list[ConnectionPoolEntry] = self._pool._queue._queue  # type: ignore[attr-defined]
        count = self._stale_prefix(entries, now)
        stale = entries[:count]
        del entries[:count]
        return stale
