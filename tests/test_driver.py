"""Statements sent straight to psycopg (`store.driver`, on `store.statement_pool`) behave
as SQLAlchemy's would: the same rows, the same exception types, and a lost connection
never handed out again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from helpers import sql, wait_for
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError, NoResultFound, OperationalError, ProgrammingError
from sqlalchemy.ext.asyncio import create_async_engine

from helix_dbos import HelixDBOS
from helix_dbos.errors import HelixShutDownError
from helix_dbos.runtime.process.process_runtime import is_transient_db_error
from helix_dbos.store.database import libpq_url, sqlalchemy_url
from helix_dbos.store.statement_pool import StatementPool


@pytest.fixture
async def pool(helix: HelixDBOS, database_url: str) -> AsyncIterator[StatementPool]:
    """A one-connection pool of this test's own, on this test's loop."""
    pool = StatementPool(libpq_url(database_url), max_size=1)
    yield pool
    await pool.close()


async def test_rows_read_through_the_driver_equal_sqlalchemys(
    pool: StatementPool, database_url: str
) -> None:
    query = text(
        "SELECT n, 'x%' || n, CAST(:doc AS jsonb) -> 'k' FROM generate_series(1, :n) AS n "
        "WHERE n >= :low ORDER BY n"
    )
    params = {"n": 3, "low": 2, "doc": '{"k": [1, "%s"]}'}
    engine = create_async_engine(sqlalchemy_url(database_url), pool_size=1, max_overflow=0)
    async with engine.connect() as conn:
        expected = [tuple(row) for row in (await conn.execute(query, params)).all()]
    await engine.dispose()
    async with pool.connection() as fast:
        assert (await fast.execute(query, params)).all() == expected
        assert (await fast.execute(query, params)).first() == expected[0]
        assert (await fast.execute(query, {**params, "low": 3})).one() == expected[1]
        assert (await fast.execute(query, params)).scalar() == 2
        with pytest.raises(NoResultFound):
            (await fast.execute(query, {**params, "low": 9})).one()
        assert (await fast.execute(query, {**params, "low": 9})).scalar() is None


async def test_errors_come_as_sqlalchemys_types_and_the_connection_stays_usable(
    pool: StatementPool,
) -> None:
    async with pool.connection() as fast:
        await fast.execute(text("CREATE TEMP TABLE t (k int PRIMARY KEY)"))
        await fast.execute(text("INSERT INTO t VALUES (:k)"), {"k": 1})
        with pytest.raises(IntegrityError) as duplicate:
            await fast.execute(text("INSERT INTO t VALUES (:k)"), {"k": 1})
        assert "duplicate key" in str(duplicate.value.orig)
        with pytest.raises(ProgrammingError):
            await fast.execute(text("SELECT no_such_column FROM t"))
        # autocommit: the failed statements took nothing else with them
        assert (await fast.execute(text("SELECT count(*) FROM t"))).scalar_one() == 1


async def test_a_connection_lost_under_the_driver_is_replaced_not_pooled(
    pool: StatementPool, database_url: str
) -> None:
    async with pool.connection() as fast:  # the pool's only connection
        pid = (await fast.execute(text("SELECT pg_backend_pid()"))).scalar_one()
        sql(database_url, "SELECT pg_terminate_backend(%s)", pid)
        with pytest.raises(OperationalError) as lost:
            await fast.execute(text("SELECT 1"))
        assert lost.value.connection_invalidated
        assert is_transient_db_error(lost.value)  # workflow code retries it
    async with pool.connection() as fast:  # the pool opened a new one in its place
        assert (await fast.execute(text("SELECT pg_backend_pid()"))).scalar_one() != pid


async def test_a_discarded_connection_takes_its_session_lock_with_it(
    pool: StatementPool, database_url: str
) -> None:
    """A start whose unlock failed discards its connection: the lock must not outlive it."""
    async with pool.connection() as fast:
        pid = (await fast.execute(text("SELECT pg_backend_pid()"))).scalar_one()
        await fast.execute(text("SELECT pg_advisory_lock(4242)"))
        await fast.discard()
    async with pool.connection() as fast:
        assert (await fast.execute(text("SELECT pg_backend_pid()"))).scalar_one() != pid
        assert (await fast.execute(text("SELECT pg_try_advisory_lock(4242)"))).scalar_one()
        await fast.execute(text("SELECT pg_advisory_unlock(4242)"))


async def test_a_closed_pool_refuses_checkouts_and_closes_what_comes_back(
    pool: StatementPool, database_url: str
) -> None:
    """`HelixDBOS.shutdown()` closes the pool: a statement after it (a workflow's tail
    still running) is refused rather than opening a pool no one closes, and a connection
    in use then is closed when it comes back."""
    async with pool.connection() as fast:
        assert (await fast.execute(text("SELECT 1"))).scalar_one() == 1
    release = asyncio.Event()

    async def in_use(started: asyncio.Future[int]) -> None:
        async with pool.connection() as fast:
            started.set_result(
                int((await fast.execute(text("SELECT pg_backend_pid()"))).scalar_one())
            )
            await release.wait()

    started: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    holder = asyncio.create_task(in_use(started))
    pid = await started
    await pool.close()
    with pytest.raises(HelixShutDownError):
        async with pool.connection():
            pass
    release.set()
    await holder
    # The connection in use at the close was closed once it came back.
    wait_for(
        lambda: not sql(database_url, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", pid),
        timeout=10,
    )


async def _hold(pool: StatementPool, held: asyncio.Event, release: asyncio.Event) -> None:
    async with pool.connection():
        held.set()
        await release.wait()


async def _queue_up(pool: StatementPool, release: asyncio.Event) -> int:
    """Let the holder go and ask for its connection at once: the holder's return then
    finds this checkout waiting (in the same loop pass as it settles in)."""
    release.set()
    async with pool.connection(timeout=5) as fast:
        return int((await fast.execute(text("SELECT 1"))).scalar_one())


async def test_a_cancelled_return_neither_loses_its_connection_nor_strands_a_waiter(
    pool: StatementPool,
) -> None:
    """A task cancelled while it gives its connection back (a step's `SlowHead` or
    `AbortWatch` stopped as its statement ends) must still hand it on. psycopg_pool's
    return is not cancellation-safe: it takes the next waiter off its queue, then awaits
    that waiter's lock, so a cancel there drops the connection and leaves that waiter
    asleep until its checkout timeout (the benchmark's 60 s "waiting for the database"
    with the database up). The cancel is tried at each point of the return."""
    for hops in range(8):
        held, release = asyncio.Event(), asyncio.Event()
        holder = asyncio.create_task(_hold(pool, held, release))  # the only connection
        await held.wait()
        waiter = asyncio.create_task(_queue_up(pool, release))
        for _ in range(hops):
            await asyncio.sleep(0)
        holder.cancel()  # somewhere in the holder's return, or after it
        await asyncio.gather(holder, return_exceptions=True)
        started = time.monotonic()
        assert await waiter == 1, hops
        assert time.monotonic() - started < 2, f"the waiter was stranded ({hops} hops)"
