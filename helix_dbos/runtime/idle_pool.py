"""DBOS's system-database pool: keeps what a busy process uses, closes it once idle.

SQLAlchemy's `QueuePool` either keeps `pool_size` connections for good or closes every
connection beyond them the moment it is given back. Helix kept 3 (an idle worker holds
few connections), so under load most of DBOS's system-database calls opened and closed a
connection (a PostgreSQL backend each): at 200 concurrent runs, about two per agent
step, more than half of PostgreSQL's CPU per step (benchmarks/bench_saturation.py). This pool
holds up to `pool_size` connections while they are used, hands out the most recently
returned first, and closes those beyond `keep` once unused for `idle_seconds`, so an
idle worker still comes down to `keep`.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy.pool import ConnectionPoolEntry, QueuePool


class IdleTrimmedQueuePool(QueuePool):
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
        """Close the connections beyond `keep` that nobody took for `idle_seconds`: with
        LIFO, the oldest returned are at the far end of the queue."""
        queue: Any = self._pool  # sqlalchemy.util.queue.Queue: a deque under a mutex
        stale: list[ConnectionPoolEntry] = []
        with queue.mutex:
            entries = queue.queue
            while len(entries) > self.keep:
                if now - self._returned.get(entries[0], now) < self.idle_seconds:
                    break
                stale.append(entries.popleft())
        for record in stale:
            self._returned.pop(record, None)
            try:
                record.close()
            finally:
                self._dec_overflow()
