"""`POST /start` with an `idempotency_key`: one run per key, whoever retries and when.

A remote parent (issue 32) starts its child with a key derived from its own run and
call, so a parent step replayed after a crash, or an HTTP retry after a lost answer,
gets the run the first attempt started. Keyed starts of one key take turns under an
advisory lock (any process); the key is reserved, with the session and turn its run
will have, before the run opens, so a start cut short anywhere is answered with its run
when that opened, and started when it did not.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

from fastapi import HTTPException
from sqlalchemy.ext.asyncio import AsyncConnection

from helix_dbos.api.models import RunStarted, StartRequest
from helix_dbos.facade.helix import HelixDBOS
from helix_dbos.runtime.process.event_loop import on_target_loop
from helix_dbos.store import start_keys

Start = Callable[[StartRequest], Awaitable[RunStarted]]


async def start_once(helix: HelixDBOS, body: StartRequest, start: Start) -> RunStarted:
    """The run `body.idempotency_key` started, started now if none did."""
    key = body.idempotency_key
    assert key is not None

    async def held_in_transaction() -> RunStarted:
        """Behind a transaction pooler: the lock is a transaction-level one, held by a
        transaction of its own on a second connection (a session-level lock would stay
        behind on the server connection the pooler lent)."""
        engine = helix.runtime.engine
        async with engine.connect() as holder, engine.connect() as conn:
            await start_keys.lock_in_transaction(holder, key)
            try:
                return await _start_locked(conn, key, body, start)
            finally:
                await conn.rollback()
                await holder.rollback()

    async def locked() -> RunStarted:
        if helix.pooler.pooled:
            return await held_in_transaction()
        async with helix.runtime.engine.connect() as conn:
            await start_keys.lock(conn, key)
            await conn.commit()
            try:
                return await _start_locked(conn, key, body, start)
            finally:
                try:
                    await conn.rollback()
                    await start_keys.unlock(conn, key)
                    await conn.commit()
                except BaseException:
                    await conn.invalidate()  # never give back a connection holding the lock
                    raise

    return await on_target_loop(locked)


async def _start_locked(
    conn: AsyncConnection, key: str, body: StartRequest, start: Start
) -> RunStarted:
    reserved = await start_keys.find(conn, key)
    if reserved is not None:
        if reserved.agent_name != body.agent or (
            body.session_id is not None and body.session_id != reserved.session_id
        ):
            raise HTTPException(
                status_code=409,
                detail=f"idempotency_key '{key}' already started agent '{reserved.agent_name}' "
                f"in session '{reserved.session_id}'",
            )
        run = await start_keys.keyed_run(conn, reserved)
        await conn.commit()
        if run is not None:
            return RunStarted(
                session_id=reserved.session_id, run_id=run.run_id, workflow_id=run.workflow_id
            )
    else:
        session_id = body.session_id or f"ses_{uuid.uuid4().hex}"
        reserved = await start_keys.reserve(conn, key, session_id, body.agent)
        await conn.commit()
    try:
        started = await start(body.model_copy(update={"session_id": reserved.session_id}))
    except BaseException:
        await start_keys.release(conn, key)
        await conn.commit()
        raise
    await start_keys.record_run(conn, key, started.run_id)
    await conn.commit()
    return started
