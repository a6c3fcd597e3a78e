"""The connections helix's own statements run on: psycopg's pool, in autocommit.

Every run and every step checks connections out for its reads and writes. Out of
SQLAlchemy's async pool, switched to autocommit and back, a checkout costs about
100 µs of Python (greenlet hops, pool events, the isolation level set and reset):
more than a short statement's round trip, on the loop that also runs the workflows.
`psycopg_pool` hands a connection out in under 10 µs. SQLAlchemy's engine keeps the
transactions (DBOS's datasource, the open of a run on an existing session).

A database restart kills every pooled connection at once, and psycopg's pool only
learns that a connection is dead when a statement fails on it: one failed statement
per pooled connection, each costing some run an attempt. So the first lost connection
retires its whole generation: a new pool takes over (its connections opened from now
on, with psycopg's backoff while the server is still down), and the old one closes
each of its connections as it comes back. A restart costs each statement in flight
then, and the one that finds out, one failure; none after.

Once helix is shut down in a process (a process launches it once), the pool refuses
checkouts (`HelixShutDownError`): the tail of a workflow still running then (the start
of a session's next stored message, after its run's end was announced) would otherwise
open a new pool whose connections no one closes.

An idle process keeps one connection here: the pool opens more under load and closes
each one idle for `IDLE_SECONDS` (an idle worker's connections are other applications'
`max_connections`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool
from sqlalchemy.exc import DBAPIError

from helix_dbos.errors import HelixShutDownError
from helix_dbos.store.driver import DriverConnection

logger = logging.getLogger("helix_dbos")

# How long a statement waits for a free connection: long enough for a burst of runs to
# take turns, short enough that a read from the HTTP API fails rather than hangs while
# the database is down (the error is transient: workflow code retries it).
CHECKOUT_TIMEOUT_SECONDS = 60.0
# How long a connection beyond the first stays open unused.
IDLE_SECONDS = 30.0
APPLICATION_NAME = "helix"  # in pg_stat_activity, unless the URL or PGAPPNAME names one

Pool = AsyncConnectionPool[psycopg.AsyncConnection[Any]]


class StatementPool:
    """At most `max_size` autocommit connections, opened on first use, on the loop of
    that use (helix's target loop: psycopg's async connections belong to one loop)."""

    def __init__(
        self,
        conninfo: str,
        max_size: int,
        timeout: float = CHECKOUT_TIMEOUT_SECONDS,
        connect_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self._conninfo = conninfo
        # Behind a transaction pooler, `prepare_threshold=None` (see `store/pooler.py`).
        self._connect_kwargs = connect_kwargs or {}
        self._max_size = max_size
        self.timeout = timeout  # a checkout's wait, unless the caller gives its own
        self._pool = self._new_pool()
        self._born = time.monotonic()  # when this generation's pool was made
        self._retiring: set[asyncio.Task[None]] = set()
        self._returning: set[asyncio.Task[None]] = set()  # returns under way (_give_back)
        self.generations = 1  # how many pools this one has had (a restart adds one)
        self._shut = False  # shut down: checkouts refused from then on

    def _new_pool(self) -> Pool:
        return AsyncConnectionPool(
            self._conninfo,
            min_size=1,
            max_size=self._max_size,
            max_idle=IDLE_SECONDS,
            kwargs={
                "autocommit": True,
                "fallback_application_name": APPLICATION_NAME,
                **self._connect_kwargs,
            },
            open=False,
            name="helix",
        )

    @asynccontextmanager
    async def connection(self, timeout: float | None = None) -> AsyncIterator[DriverConnection]:
        """A connection, waited for up to `timeout` seconds (`PoolTimeout` after; while
        the server refuses new connections, as when its `max_connections` is taken, the
        pool keeps trying meanwhile)."""
        timeout = self.timeout if timeout is None else timeout
        if self._shut:
            raise HelixShutDownError(
                "helix was shut down in this process: its statements are refused"
            )
        pool = self._pool
        if pool.closed:
            await pool.open()  # the first use; open() is idempotent under concurrent calls
        raw = await pool.getconn(timeout=timeout)
        try:
            async with raw:  # as psycopg_pool's connection(): ends a transaction left open
                try:
                    yield DriverConnection(raw)
                except DBAPIError as exc:
                    if exc.connection_invalidated and pool is self._pool:
                        self._retire("a statement lost its connection")
                    raise
        finally:
            await self._give_back(pool, raw)

    async def _give_back(self, pool: Pool, raw: psycopg.AsyncConnection[Any]) -> None:
        """Return `raw` in a task of its own, which cancelling the caller does not stop.

        psycopg_pool's return takes the next waiting checkout off its queue, then awaits
        that waiter's lock (held while the waiter settles in): a return cancelled there
        (a step's `SlowHead` or `AbortWatch` stopped as its statement ends) drops the
        connection, and the waiter it took sleeps until its checkout times out (60 s,
        the database up). Cancelled on the pool's own lock, the connection is lost."""
        task = asyncio.get_running_loop().create_task(pool.putconn(raw))
        self._returning.add(task)
        task.add_done_callback(self._returning.discard)
        await asyncio.shield(task)

    async def why_unavailable(self) -> str:
        """Why a checkout timed out, said plainly: one connection of its own tells a
        server that refuses new ones (its `max_connections` taken: "too many clients")
        from a pool whose connections are all busy."""
        try:
            probe = await psycopg.AsyncConnection.connect(self._conninfo, connect_timeout=5)
        except psycopg.Error as exc:
            return "the server refused a new connection: " + " ".join(str(exc).split())
        await probe.close()
        return f"all {self._max_size} of helix's pooled connections were busy"

    def connections_lost(self, since: float) -> None:
        """Another connection to the same server (the LISTEN connection) was lost at
        `since` (`time.monotonic()`): the connections opened before are suspect too."""
        if self._born < since and not self._pool.closed:
            self._retire("the listening connection was lost")

    def _retire(self, why: str) -> None:
        """A new pool for what follows; the old one closes its connections as they
        come back (one in use is not interrupted)."""
        old, self._pool = self._pool, self._new_pool()
        self._born = time.monotonic()
        self.generations += 1
        logger.warning("helix retires its pooled connections (%s): a new pool takes over", why)
        task = asyncio.get_running_loop().create_task(old.close())
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    def shut(self) -> None:
        """Refuse checkouts from now on (a shutdown, before `close()` gets to run)."""
        self._shut = True

    async def close(self) -> None:
        """Refuse checkouts, and close every connection: the ones in use as they come back."""
        self._shut = True
        await self._pool.close()
        await asyncio.gather(*self._retiring, *self._returning, return_exceptions=True)
