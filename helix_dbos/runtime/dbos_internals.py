"""The one module that reads DBOS's private state.

DBOS 3.4 has no public API for these few facts; each function says what it
needs and why. Ruff's banned-API rule (TID251) forbids `dbos._*` imports
everywhere else, so an upgrade of DBOS has one file to check.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

import dbos._dbos as _dbos_module
from dbos import AsyncSQLAlchemyDatasource
from dbos._context import get_local_dbos_context
from dbos._core import WorkflowHandleAsyncTask
from dbos._datasource_postgres import PostgresAsyncDatasource
from dbos._error import (  # raised by DBOS.send to a workflow that does not exist (yet)
    DBOSNonExistentWorkflowError as DBOSNonExistentWorkflowError,
)
from dbos._error import DBOSWorkflowConflictIDError
from dbos._queue import QueueRateLimit as QueueRateLimit  # a TypedDict DBOS does not export
from dbos._serialization import DBOSDefaultSerializer
from sqlalchemy.ext.asyncio import AsyncEngine

# A BaseException, so no `except Exception` in helix catches it: raised where an
# execution finds its workflow owned by another, DBOS parks the execution.
WorkflowNotOwnedError = DBOSWorkflowConflictIDError


def local_task(handle: object) -> asyncio.Future[Any] | None:
    """The task of a workflow this process started and runs, from its start handle: it
    completes once DBOS has recorded the workflow's end, so awaiting it needs no poll."""
    return handle.task if isinstance(handle, WorkflowHandleAsyncTask) else None


def is_configured() -> bool:
    """`DBOS(config=...)` was called in this process (by helix or by the application)."""
    return _dbos_module._dbos_global_instance is not None


def is_launched() -> bool:
    """`DBOS.launch()` has run: workflows can start and recovered runs execute."""
    instance = _dbos_module._dbos_global_instance
    return instance is not None and bool(instance._launched)


def target_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop DBOS runs recovered async workflows on.

    Helix does all its database work there, since SQLAlchemy's async pool must
    not be shared between event loops.
    """
    instance = _dbos_module._dbos_global_instance
    if instance is None:
        return None
    return instance._background_event_loop.target_loop()


def registered_workflow(name: str) -> Callable[..., Any] | None:
    """A workflow function registered under `name` (`__run_workflow__` starts any
    registered workflow by name, as seed 003's catalogue does)."""
    instance = _dbos_module._dbos_global_instance
    if instance is None:
        return None
    return instance._registry.workflow_info_map.get(name)


def listening_queues() -> list[str] | None:
    """The queues `DBOS.listen_queues` restricted this process to (None: every queue)."""
    instance = _dbos_module._dbos_global_instance
    if instance is None:
        return None
    queues: list[str] | None = instance._listening_queues
    return queues


def listen_also(queue_name: str) -> None:
    """Add a queue to a launched process's `listen_queues` (DBOS allows the list only
    before launch; its queue thread re-reads it every second). Helix needs it for an
    agent registered after launch: its worker must dequeue that agent's runs."""
    instance = _dbos_module._dbos_global_instance
    if instance is None or instance._listening_queues is None:
        return  # not restricted: every queue is listened to already
    if queue_name not in instance._listening_queues:
        instance._listening_queues.append(queue_name)


def app_name() -> str:
    """The DBOS application name: workflows of other applications on the same database
    are not this process's to recover."""
    instance = _dbos_module._dbos_global_instance
    if instance is None:
        raise RuntimeError("DBOS is not configured")
    name: str = instance._config["name"]
    return name


def recheck_message_waiters() -> None:
    """Every `recv` waiting in this process looks for its message in the database once
    (blocking: call it in a thread). DBOS wakes a waiting recv on its notification, and
    otherwise re-checks once a minute: a message sent while DBOS's listener was cut off
    (a database restart) would wait that minute. Helix's own listener calls this when it
    connects again after losing its connection."""
    instance = _dbos_module._dbos_global_instance
    if instance is None or not instance._launched:
        return
    sys_db = instance._sys_db
    for _payload, components, event in sys_db.notifications_map.snapshot():
        # The key's signal, which sets every waiter's event, as DBOS's own poll does.
        sys_db.recv_check(components[0], components[1], cast(Any, event))


def execution_owner() -> tuple[str, str] | None:
    """The workflow this code executes for and this execution's ownership token (DBOS
    writes a new one on the workflow's row whenever another execution takes it over, and
    refuses the checkpoints of any other), or None outside a workflow. Helix's own writes
    carry it, so a fenced worker's late write cannot land either."""
    ctx = get_local_dbos_context()
    if ctx is None or not ctx.workflow_id or ctx.owner_xid is None:
        return None
    return ctx.workflow_id, ctx.owner_xid


def unmigrated_datasource(url: str, engine: AsyncEngine, schema: str) -> AsyncSQLAlchemyDatasource:
    """DBOS's exactly-once Postgres datasource on `engine`, constructed without touching
    the database: `AsyncSQLAlchemyDatasource.create` migrates (or verifies) its table at
    once, and DBOS requires a datasource to exist before its launch, so a constructor
    that does no I/O builds it here and migrates it later (`HelixDBOS.migrate()`, with
    DBOS's public `AsyncSQLAlchemyDatasource.migrate`)."""
    return PostgresAsyncDatasource(
        database_url=url,
        engine_kwargs={},
        engine=engine,
        schema=schema,
        serializer=DBOSDefaultSerializer,
    )
