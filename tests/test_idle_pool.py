"""DBOS's system-database pool and helix's transaction pool (runtime/process/idle_pool.py): a
busy process reuses its connections instead of opening one per call; an idle one comes
down to `keep`."""

from __future__ import annotations

import asyncio
import time

import sqlalchemy as sa
from helpers import sql
from sqlalchemy.ext.asyncio import create_async_engine

from helix_dbos.runtime.process.idle_pool import IdleTrimmedAsyncQueuePool, IdleTrimmedQueuePool
from helix_dbos.store.database import sqlalchemy_url

APP = "idle-pool-test"


def backends(database_url: str, expected: int) -> int:
    """The pool's connections the server lists, once it lists `expected` (a closed
    connection's backend leaves pg_stat_activity a moment after the close), or after 10 s."""
    deadline = time.monotonic() + 10
    while True:
        query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
        count = sql(database_url, query, APP)[0][0]
        if count == expected or time.monotonic() > deadline:
            return count
        time.sleep(0.05)


def trimming_fast(monkeypatch, pool_class: type) -> dict[str, object]:
    """`pool_class` trimmed at every return, after 0.5 s unused; the engine's pool
    arguments (up to 8 connections, named `APP` on the server)."""
    monkeypatch.setattr(pool_class, "idle_seconds", 0.5)
    monkeypatch.setattr(pool_class, "trim_every_seconds", 0.0)
    return {
        "poolclass": pool_class,
        "pool_size": 8,
        "max_overflow": 0,
        "connect_args": {"application_name": APP},
    }


def test_a_busy_pool_reuses_its_connections_and_an_idle_one_closes_all_but_keep(
    database_url, monkeypatch
):
    engine = sa.create_engine(
        sqlalchemy_url(database_url), **trimming_fast(monkeypatch, IdleTrimmedQueuePool)
    )
    created: list[object] = []
    sa.event.listen(engine, "connect", lambda conn, record: created.append(conn))
    try:
        for _ in range(5):  # 6 at a time, five times over: 6 connections, not 30
            held = [engine.connect() for _ in range(6)]
            for conn in held:
                conn.execute(sa.text("SELECT 1"))
            for conn in held:
                conn.close()
        assert len(created) == 6
        assert engine.pool.checkedin() == 6 and backends(database_url, 6) == 6

        time.sleep(0.6)  # unused past idle_seconds: the next return closes the extras
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        assert engine.pool.checkedin() == IdleTrimmedQueuePool.keep
        keep = IdleTrimmedQueuePool.keep
        assert backends(database_url, keep) == keep

        held = [engine.connect() for _ in range(8)]  # up to pool_size again
        assert len(created) == 6 + 8 - IdleTrimmedQueuePool.keep
        for conn in held:
            conn.close()
    finally:
        engine.dispose()


async def test_the_transaction_pool_reuses_its_connections_and_an_idle_one_keeps_one(
    database_url, monkeypatch
):
    """Helix's own transaction pool (`worker_process.transaction_engine`): many runs
    resuming at once reuse connections instead of opening one per transaction."""
    engine = create_async_engine(
        sqlalchemy_url(database_url), **trimming_fast(monkeypatch, IdleTrimmedAsyncQueuePool)
    )
    created: list[object] = []
    sa.event.listen(engine.sync_engine, "connect", lambda conn, record: created.append(conn))
    try:
        for _ in range(5):  # 6 at a time, five times over: 6 connections, not 30
            held = [await engine.connect() for _ in range(6)]
            for conn in held:
                await conn.execute(sa.text("SELECT 1"))
            for conn in held:
                await conn.close()
        assert len(created) == 6
        assert engine.pool.checkedin() == 6 and backends(database_url, 6) == 6

        await asyncio.sleep(0.6)  # unused past idle_seconds: the next return closes the rest
        async with engine.connect() as conn:
            await conn.execute(sa.text("SELECT 1"))
        keep = IdleTrimmedAsyncQueuePool.keep
        assert keep == 1 and engine.pool.checkedin() == keep
        assert backends(database_url, keep) == keep

        held = [await engine.connect() for _ in range(8)]  # up to pool_size again
        assert len(created) == 6 + 8 - keep
        for conn in held:
            await conn.close()
    finally:
        await engine.dispose()
