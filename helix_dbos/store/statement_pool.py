"""The connections helix's own statements run on: psycopg's pool, in autocommit.

Every run and every step checks connections out for its reads and writes. Out of
SQLAlchemy's async pool, switched to autocommit and back, a checkout costs about
100 µs of Python (greenlet hops, pool events, the isolation level set and reset):
more than a short statement's round trip, on the loop that also runs the workflows.
`psycopg_pool` hands a connection out in under 10 µs. SQLAlchemy's engine keeps the
transactions (DBOS's datasource, the open of a run on an existing session).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from helix_dbos.store.driver import DriverExecutor

# How long a statement waits for a free connection: long enough for a burst of runs to
# take turns, short enough that a read from the HTTP API fails rather than hangs while
# the database is down (the error is transient: workflow code retries it).
CHECKOUT_TIMEOUT_SECONDS = 60.0


class StatementPool:
    """At most `max_size` autocommit connections, opened on first use, on the loop of
    that use (helix's target loop: psycopg's async connections belong to one loop)."""

    def __init__(self, conninfo: str, max_size: int) -> None:
        self._conninfo = conninfo
        self._max_size = max_size
        self._pool = self._new_pool()

    def _new_pool(self) -> AsyncConnectionPool[psycopg.AsyncConnection[Any]]:
        return AsyncConnectionPool(
            self._conninfo,
            min_size=min(2, self._max_size),
            max_size=self._max_size,
            kwargs={"autocommit": True},
            open=False,
            name="helix",
        )

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[DriverExecutor]:
        pool = self._pool
        if pool.closed:
            await pool.open()  # the first use; open() is idempotent under concurrent calls
        async with pool.connection(timeout=CHECKOUT_TIMEOUT_SECONDS) as raw:
            yield DriverExecutor(raw)

    async def close(self) -> None:
        """Close every connection; a later use opens a new pool (a pool does not reopen)."""
        pool, self._pool = self._pool, self._new_pool()
        await pool.close()
