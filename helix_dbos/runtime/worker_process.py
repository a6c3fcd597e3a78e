"""This process's part of the fleet: DBOS's configuration, the database's migrations,
the worker lease taken at launch, and the shutdown that gives it all back.

Nothing here touches the database before `migrate()` or `launch()`, so constructing a
`HelixDBOS` at module level (as an app or the CLI's `--app` does) stays free of I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import psycopg
from dbos import DBOS, AsyncSQLAlchemyDatasource, DBOSConfig
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from helix_dbos.definitions.agent import Agent
from helix_dbos.llm.base import LLMAdapter
from helix_dbos.llm.providers import resolve_adapter
from helix_dbos.runtime.dbos import dbos_internals, dbos_tables, worker_workflows
from helix_dbos.runtime.process import model_limits
from helix_dbos.runtime.process.event_loop import run_sync, running_loop, target_loop
from helix_dbos.runtime.process.idle_pool import IdleTrimmedAsyncQueuePool, IdleTrimmedQueuePool
from helix_dbos.runtime.process.process_runtime import Runtime, logger, no_lease, set_runtime
from helix_dbos.runtime.process.wait_parking import WaitParking
from helix_dbos.runtime.process.workers import Fence, WorkerLease, default_executor_id
from helix_dbos.runtime.starts.dispatch import Dispatch
from helix_dbos.runtime.starts.run_starts import RunStarts
from helix_dbos.runtime.starts.run_waits import RunWaits
from helix_dbos.runtime.waits.message_recheck import MessageRecheck
from helix_dbos.store.database import (
    connect,
    ensure_database_exists,
    libpq_url,
    sqlalchemy_url,
)
from helix_dbos.store.features.workers import WorkerIdentity, WorkerRow
from helix_dbos.store.migrations import apply_migrations
from helix_dbos.store.pooler import DIRECT, PoolerSettings, pooler_warning
from helix_dbos.store.statement_pool import StatementPool

# Fixed for good (issue 45): DBOS recovers a workflow only in a process of the version that
# started it, so moving the default strands every run in flight at each upgrade (it moved
# from helix-1 to helix-6 in development builds, before 0.1.0). A change to what a helix
# workflow checkpoints goes behind a named patch instead (`runtime/process/patches.py`,
# docs/upgrading.md); the version is the user's knob (`application_version=`,
# HELIX_APP_VERSION). tests/test_patches.py fails if it moves.
DEFAULT_APP_VERSION = "helix-6"
ENGINE_APPLICATION_NAME = "helix-tx"  # SQLAlchemy's connections, in pg_stat_activity
DBOS_POOL_MAX = 20  # DBOS's own default
DATASOURCE_SCHEMA = "dbos"
DEFAULT_SCHEDULER_POLL_SECONDS = 5.0


def configure_dbos(
    app_name: str,
    database_url: str,
    application_version: str,
    executor_id: str | None,
    pooler: PoolerSettings = DIRECT,
) -> None:
    """`DBOS(config=...)` for helix, unless the application configured DBOS itself."""
    if dbos_internals.is_configured():
        return
    config: DBOSConfig = {
        "name": app_name,
        "system_database_url": libpq_url(database_url),
        "application_version": application_version,
        "log_level": os.environ.get("HELIX_LOG_LEVEL", "WARNING"),
        # No ping before each system-database call (a round trip per DBOS operation,
        # four per step): DBOS retries an operation whose connection was lost.
        # DBOS's pool, of up to 20 as DBOS sizes it, keeps those in use and closes all
        # but 3 (besides its LISTEN one) once idle for a while (idle_pool.py), so an
        # idle worker holds what its queue and scheduler threads use, and a busy one
        # does not open a connection per call.
        "db_engine_kwargs": {
            "pool_pre_ping": False,
            "poolclass": IdleTrimmedQueuePool,
            "pool_size": DBOS_POOL_MAX,
            "max_overflow": 0,
            "pool_timeout": 30,
            "connect_args": {
                "application_name": "dbos_transact",
                "connect_timeout": 10,
                **pooler.psycopg_kwargs(),
            },
        },
        # DBOS's default: half its pool (its pool_size, 2 here, would give 1).
        "sys_db_polling_concurrency": DBOS_POOL_MAX // 2,
        # How soon a schedule created, paused, resumed or deleted elsewhere is seen
        # (DBOS's default, 30 s, is long for a pause; one small query per poll).
        "scheduler_polling_interval_sec": float(
            os.environ.get("HELIX_SCHEDULER_POLL_SECONDS", DEFAULT_SCHEDULER_POLL_SECONDS)
        ),
    }
    if pooler.pooled:
        # LISTEN does not cross a transaction pooler: DBOS's listener polls for the
        # messages and events its waiters wait for (its triggers still NOTIFY, harmless).
        config["use_listen_notify"] = False
        config["notification_listener_polling_interval_sec"] = pooler.poll_seconds
        # DBOS's session-level SET of idle_in_transaction_session_timeout on each new
        # connection would stay on the server connection the pooler lent.
        config["sys_db_idle_transaction_timeout_sec"] = 0
    config["executor_id"] = (
        executor_id
        or os.environ.get("HELIX_EXECUTOR_ID")
        or os.environ.get("DBOS__VMID")
        or default_executor_id()
    )
    DBOS(config=config)


def transaction_engine(
    database_url: str, pool_size: int, pooler: PoolerSettings = DIRECT
) -> AsyncEngine:
    """SQLAlchemy's pool, for transactions (DBOS's datasource, a few of helix's own);
    psycopg's statement pool, of 2 * pool_size, takes every other statement."""
    return create_async_engine(
        sqlalchemy_url(database_url),
        # Up to pool_size connections, kept while they are used; all but one close
        # once unused for a while (idle_pool.py), so an idle process holds no more
        # than it needs and a busy one does not open a connection per transaction.
        poolclass=IdleTrimmedAsyncQueuePool,
        pool_size=pool_size,
        max_overflow=0,
        connect_args={
            "fallback_application_name": ENGINE_APPLICATION_NAME,
            **pooler.psycopg_kwargs(),
        },
        # Under a burst (a thousand runs resuming at once) wait for a connection;
        # failing a durable run because the pool was busy would be worse.
        pool_timeout=600,
    )


def process_runtime(
    database_url: str,
    agents: dict[str, Agent],
    llm: LLMAdapter | None,
    *,
    pool_size: int,
    approval_timeout_seconds: float,
    client_tool_timeout_seconds: float,
    database_outage_seconds: float,
    connection_timeout_seconds: float,
    parking: WaitParking,
    pooler: PoolerSettings = DIRECT,
) -> Runtime:
    """The process-wide runtime the agent workflow finds its dependencies in (set as the
    current one). Its pools connect on first use; DBOS's exactly-once datasource on
    helix's engine (its checkpoint table in schema `dbos`) is registered now, as DBOS
    requires before its launch, and migrated by `migrate`."""
    engine = transaction_engine(database_url, pool_size, pooler)
    runtime = Runtime(
        agents=agents,
        engine=engine,
        statement_pool=StatementPool(
            libpq_url(database_url),
            2 * pool_size,
            connection_timeout_seconds,
            pooler.psycopg_kwargs(),
        ),
        datasource=dbos_internals.unmigrated_datasource(
            sqlalchemy_url(database_url), engine, DATASOURCE_SCHEMA
        ),
        llm=llm,
        adapter_factory=provider_adapter,
        approval_timeout_seconds=approval_timeout_seconds,
        client_tool_timeout_seconds=client_tool_timeout_seconds,
        database_outage_seconds=database_outage_seconds,
        connection_timeout_seconds=connection_timeout_seconds,
        parking=parking,
        pooler=pooler,
    )
    set_runtime(runtime)
    return runtime


def provider_adapter(agent: Agent) -> LLMAdapter:
    """The adapter of a `provider:model` agent (`HelixDBOS(llm=...)` serves `mock`)."""
    kwargs: dict[str, Any] = {}
    if agent.llm.base_url:
        kwargs["base_url"] = agent.llm.base_url
    return resolve_adapter(agent.llm.model, **kwargs)


@dataclass(frozen=True)
class Migrated:
    created: bool  # the database did not exist
    applied: list[str]  # helix's migrations applied now


def migrate(database_url: str, pooler: PoolerSettings = DIRECT) -> Migrated:
    """Create the database if missing, then bring helix's tables, DBOS's system tables
    and the datasource's checkpoint table up to date; each under its own lock, and one
    query each once current (`HelixDBOS.migrate`, `helix-dbos migrate`).

    Behind a pooler, over the direct URL when there is one (DBOS migrates under a
    session-level lock); else helix's migrations run in one transaction."""
    if pooler.listen_url is not None:
        database_url = pooler.listen_url
    created = ensure_database_exists(database_url)
    applied = apply_migrations(database_url, pooled=pooler.pooled and pooler.listen_url is None)
    if not dbos_internals.is_launched():
        # DBOS's tables up to date before anything here reads them (the lease's first
        # claim, at launch): on an empty database, workers started together would
        # otherwise read a table that another one's DBOS launch is still migrating.
        DBOS.migrate(libpq_url(database_url))
    with ThreadPoolExecutor(max_workers=1) as pool:  # from sync and async code alike
        migration = AsyncSQLAlchemyDatasource.migrate(
            sqlalchemy_url(database_url), schema=DATASOURCE_SCHEMA
        )
        pool.submit(asyncio.run, migration).result()
    return Migrated(created, applied)


def list_workers(database_url: str) -> list[WorkerRow]:
    with connect(database_url, autocommit=True) as conn:
        return worker_workflows.list_workers(conn)


class WorkerProcess:
    """This process's lease, launch and shutdown, for one HelixDBOS."""

    def __init__(
        self,
        runtime: Runtime,
        dispatch: Dispatch,
        starts: RunStarts,
        waits: RunWaits,
        database_url: str,
    ) -> None:
        self.runtime = runtime
        self.dispatch = dispatch
        self.starts = starts
        self.waits = waits
        self.database_url = database_url
        self.lease: WorkerLease | None = None
        self._closing: set[asyncio.Task[None]] = set()  # closes under way (see shutdown)
        self._sweep: asyncio.Task[None] | None = None
        self._recheck = MessageRecheck()

    def launch(self, lease_seconds: float, reconcile_seconds: float) -> WorkerLease:
        """Take this worker's lease, launch DBOS (unless the application did), register
        the queues, and reconcile runs every `reconcile_seconds`.

        The executor id is refused while another live process heartbeats under it. This
        worker's own unfinished runs (a restart under a stable id) and, from then on, the
        runs of any worker that dies (its lease lapses, or its connection closes and it
        misses two heartbeats, or it ran on this host and its pid is gone) are handed back
        to the queues and resume on a worker that serves their agent."""
        agents = self.runtime.agents
        self.dispatch.check_agents(agents)
        if self.dispatch.executes_runs:
            self.runtime.check_agents(list(agents.values()))
        identity = self._identity(lease_seconds)
        pooler = self.runtime.pooler
        self._say_pooler(pooler)
        lease = WorkerLease(
            self.database_url,
            identity,
            heartbeat_url=pooler.listen_url,
            early_death=not pooler.pooled or pooler.listen_url is not None,
        )
        lease.acquire()
        # Heartbeat from now on: DBOS's launch can outlast the fence, and the runs it
        # recovers are fenced like any other.
        lease.start()
        self.runtime.lease_check = Fence(lease, self._owns_workflow)
        try:
            # A crashed predecessor on this host: its runs go back to the queues now.
            lease.take_over_predecessors()
            if not dbos_internals.is_launched():  # else the application launched DBOS itself
                self._hand_back_own_runs(identity, lease.predecessor)
                self._listen(identity)
                DBOS.launch()
            dbos_internals.install_step_checks()  # each step's check without a transaction
            self.dispatch.register(agents)
            model_limits.register(agents.values(), listen=False)
            self._recheck.start()  # one re-check for every waiting recv, not one each
        except BaseException:
            self.runtime.lease_check = no_lease
            lease.stop()
            raise
        self.lease = lease
        self.runtime.serves_version = (
            identity.application_version if identity.executes_runs else None
        )
        sweep = self.starts.reconcile_forever(reconcile_seconds)
        if running_loop() is None:  # from sync code: start it on the loop DBOS runs workflows on
            self._sweep = run_sync(lambda: _as_task(sweep))
        else:  # launched from async code, on the loop DBOS adopted
            self._sweep = asyncio.get_running_loop().create_task(sweep)
        return lease

    def _say_pooler(self, pooler: PoolerSettings) -> None:
        """Say at launch how helix reaches the database, and warn when the URL reaches
        PgBouncer while helix is not set up for a pooler (the check is cheap: one
        connection, and PgBouncer's console is tried only when the ports differ)."""
        if pooler.pooled:
            logger.warning("helix reaches PostgreSQL %s", pooler.describe())
            return
        try:
            warning = pooler_warning(self.database_url, pooler)
        except psycopg.Error:
            return  # the launch that follows says what is wrong with the database
        if warning is not None:
            logger.warning("helix: %s", warning)

    def _identity(self, lease_seconds: float) -> WorkerIdentity:
        executes = self.dispatch.executes_runs
        return WorkerIdentity(
            executor_id=DBOS.executor_id,
            application_name=dbos_internals.app_name(),
            application_version=DBOS.application_version,
            host=socket.gethostname(),
            pid=os.getpid(),
            agents=tuple(sorted(self.runtime.agents)) if executes else (),
            executes_runs=executes,
            lease_seconds=lease_seconds,
        )

    def _hand_back_own_runs(self, me: WorkerIdentity, predecessor: str | None) -> None:
        """Before DBOS's startup recovery: this executor's pending runs (its previous
        life's, under a stable executor id) go to their agents' queues (DBOS would put
        them on its internal queue, which every process dequeues, whether or not it
        serves the agent)."""
        with connect(self.database_url, autocommit=True) as conn:
            moved = worker_workflows.requeue_pending(
                conn, me.executor_id, me.application_name, me.application_version
            )
        if moved:
            logger.warning(
                "helix worker %s took over %d unfinished run(s) of its previous life%s",
                me.executor_id,
                len(moved),
                f" ({predecessor})" if predecessor else "",
            )

    async def _owns_workflow(self, workflow_id: str, owner_xid: str) -> bool:
        async with self.runtime.statements() as conn:
            return await dbos_tables.owns_workflow(conn, workflow_id, owner_xid)

    def _listen(self, me: WorkerIdentity) -> None:
        """Dequeue only the runs of agents this process serves, plus the queues it was
        told to listen to; an application that chose its own queues keeps its choice."""
        if dbos_internals.listening_queues() is not None:
            return
        served = [a for name, a in self.runtime.agents.items() if name in me.agents]
        DBOS.listen_queues(self.dispatch.listen_list(me.agents) + model_limits.queue_names(served))

    def shutdown(self) -> None:
        # At once, before the closes below get to run: a workflow's tail still running
        # (or a sweep) must not open the pool again, with connections no one would close.
        self.runtime.statement_pool.shut()
        if self._sweep is not None:  # its statements are refused from here on
            if running_loop() is self._sweep.get_loop():
                # At once: a callback would come after DBOS is gone, and a sweep that woke
                # first would warn that it could not reconcile.
                self._sweep.cancel()
            else:
                with contextlib.suppress(RuntimeError):  # its loop is closed already
                    self._sweep.get_loop().call_soon_threadsafe(self._sweep.cancel)
            self._sweep = None
        if self.waits.notifier_started is not None:
            self._close_on_target_loop(self.waits.notifier_started.stop)
            self.waits.notifier_started = None
        self._close_on_target_loop(self.runtime.wake_ups.close)  # before its pool
        self._close_on_target_loop(self.runtime.statement_pool.close)
        self._close_on_target_loop(self.runtime.engine.dispose)  # its idle connections
        self._recheck.stop()
        self.runtime.serves_version = None
        set_runtime(None)
        DBOS.destroy(destroy_registry=False)
        if self.lease is not None:
            self.lease.stop()
            self.lease = None

    def _close_on_target_loop(self, close: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run `close` on the loop its connections belong to: waited for from another
        thread, or in a task of its own when shutdown() is called on that loop, where it
        cannot be waited for."""
        with contextlib.suppress(RuntimeError):  # DBOS never launched, or its loop is gone
            loop = target_loop()
            if running_loop() is loop:
                task = loop.create_task(close())
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)
            else:
                run_sync(close)


async def _as_task(coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
    """`coroutine` as a task of the running loop (run there with `run_sync`)."""
    return asyncio.get_running_loop().create_task(coroutine)
