"""Statements sent straight to psycopg (`store.driver`) behave as SQLAlchemy's would:
the same rows, the same exception types, and a lost connection never handed out again."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from helpers import sql
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError, NoResultFound, OperationalError, ProgrammingError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from helix_dbos import HelixDBOS
from helix_dbos.store.database import sqlalchemy_url
from helix_dbos.store.driver import driver


@pytest.fixture
async def engine(helix: HelixDBOS, database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(sqlalchemy_url(database_url), pool_size=1, max_overflow=0)
    yield engine
    await engine.dispose()


async def test_rows_read_through_the_driver_equal_sqlalchemys(engine: AsyncEngine) -> None:
    query = text(
        "SELECT n, 'x%' || n, CAST(:doc AS jsonb) -> 'k' FROM generate_series(1, :n) AS n "
        "WHERE n >= :low ORDER BY n"
    )
    params = {"n": 3, "low": 2, "doc": '{"k": [1, "%s"]}'}
    async with engine.connect() as conn:
        auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
        expected = [tuple(row) for row in (await auto.execute(query, params)).all()]
        fast = await driver(auto)
        assert (await fast.execute(query, params)).all() == expected
        assert (await fast.execute(query, params)).first() == expected[0]
        assert (await fast.execute(query, {**params, "low": 3})).one() == expected[1]
        assert (await fast.execute(query, params)).scalar() == 2
        with pytest.raises(NoResultFound):
            (await fast.execute(query, {**params, "low": 9})).one()
        assert (await fast.execute(query, {**params, "low": 9})).scalar() is None


async def test_errors_come_as_sqlalchemys_types_and_the_connection_stays_usable(
    engine: AsyncEngine,
) -> None:
    async with engine.connect() as conn:
        fast = await driver(await conn.execution_options(isolation_level="AUTOCOMMIT"))
        await fast.execute(text("CREATE TEMP TABLE t (k int PRIMARY KEY)"))
        await fast.execute(text("INSERT INTO t VALUES (:k)"), {"k": 1})
        with pytest.raises(IntegrityError) as duplicate:
            await fast.execute(text("INSERT INTO t VALUES (:k)"), {"k": 1})
        assert "duplicate key" in str(duplicate.value.orig)
        with pytest.raises(ProgrammingError):
            await fast.execute(text("SELECT no_such_column FROM t"))
        assert (await fast.execute(text("SELECT count(*) FROM t"))).scalar_one() == 1


async def test_a_connection_lost_under_the_driver_is_invalidated_not_pooled(
    engine: AsyncEngine, database_url: str
) -> None:
    async with engine.connect() as conn:  # the pool's only connection
        fast = await driver(await conn.execution_options(isolation_level="AUTOCOMMIT"))
        pid = (await fast.execute(text("SELECT pg_backend_pid()"))).scalar_one()
        sql(database_url, "SELECT pg_terminate_backend(%s)", pid)
        with pytest.raises(OperationalError) as lost:
            await fast.execute(text("SELECT 1"))
        assert lost.value.connection_invalidated
    async with engine.connect() as conn:  # the pool opened a new one in its place
        fast = await driver(await conn.execution_options(isolation_level="AUTOCOMMIT"))
        assert (await fast.execute(text("SELECT pg_backend_pid()"))).scalar_one() != pid
