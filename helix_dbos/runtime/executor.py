"""`HelixDBOS`: register agents, launch DBOS, start runs and read sessions."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

from dbos import DBOS, AsyncSQLAlchemyDatasource, DBOSConfig, WorkflowStatus
from psycopg_pool import PoolTimeout
from pydantic import ValidationError
from sqlalchemy import Row, text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from helix_dbos.definitions.agent import Agent, TerminatingConfig
from helix_dbos.definitions.queue import RunQueue
from helix_dbos.errors import (
    AgentAlreadyRunningError,
    AgentNotRegisteredError,
    DatabaseUnavailableError,
    InvalidAnswerError,
    RunNotActiveError,
    RunNotFoundError,
    SessionAgentMismatchError,
    SessionNotFoundError,
    ToolCallAlreadyAnsweredError,
    ToolCallNotFoundError,
    ToolOutputError,
)
from helix_dbos.llm.base import LLMAdapter
from helix_dbos.llm.providers import resolve_adapter
from helix_dbos.log_events import RUN_ABORTED, gate_event, log_event
from helix_dbos.orchestration.messages import (
    synthesize_finish_tool_result,
)
from helix_dbos.orchestration.types import Message
from helix_dbos.runtime import dbos_internals
from helix_dbos.runtime.closing import close_run
from helix_dbos.runtime.context import Runtime, logger, no_lease, set_runtime
from helix_dbos.runtime.dispatch import Dispatch, check_priority
from helix_dbos.runtime.event_loop import on_target_loop, run_sync, running_loop, target_loop
from helix_dbos.runtime.handle import RunHandle
from helix_dbos.runtime.hitl import ANSWER_MODELS, INTERRUPT_TOPIC, TOPICS
from helix_dbos.runtime.llm_step import run_terminating
from helix_dbos.runtime.outage import DEFAULT_OUTAGE_SECONDS, is_transient_db_error
from helix_dbos.runtime.results import (
    TERMINAL_STATUSES,
    AgentResult,
    RunInfo,
    SessionInfo,
    run_result,
)
from helix_dbos.runtime.run_trace import emit_run_span
from helix_dbos.runtime.step_types import GateKind, RunOptions
from helix_dbos.runtime.time_travel import Checkpoint, CheckpointView, PruneReport, TimeTravel
from helix_dbos.runtime.workers import (
    DEFAULT_LEASE_SECONDS,
    Fence,
    WorkerLease,
    default_executor_id,
)
from helix_dbos.store import repository as repo
from helix_dbos.store import run_bounds, tree
from helix_dbos.store import workers as workers_sql
from helix_dbos.store.database import (
    connect,
    ensure_database_exists,
    libpq_url,
    resolve_database_url,
    sqlalchemy_url,
)
from helix_dbos.store.migrations import apply_migrations
from helix_dbos.store.run_bounds import RunOutcome
from helix_dbos.store.statement_pool import CHECKOUT_TIMEOUT_SECONDS, StatementPool
from helix_dbos.store.storable import check_storable
from helix_dbos.store.tree import TreeRun
from helix_dbos.store.workers import WorkerIdentity, WorkerRow
from helix_dbos.streaming.chunks import TERMINAL_CHUNK_TYPES, StreamChunk
from helix_dbos.streaming.notifier import ChunkNotifier, run_end_key
from helix_dbos.streaming.reads import SharedChunkReads

# Changes only when the step sequence or the checkpointed step outputs of
# `helix.agent_run` change, so a recovering process never replays a run recorded
# with another shape (helix-3: typed step outputs; helix-4: a sub-agent call's hooks,
# interrupt hand-over and companion waits are steps of their own).
DEFAULT_APP_VERSION = "helix-4"
ENGINE_APPLICATION_NAME = "helix-tx"  # SQLAlchemy's connections, in pg_stat_activity
DBOS_POOL_MAX = 20  # DBOS's own default
DBOS_POOL_KEPT = 3
_DBOS_TERMINAL = {"SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"}


T = TypeVar("T")
P = ParamSpec("P")


def _list_workers(database_url: str) -> list[WorkerRow]:
    with connect(database_url, autocommit=True) as conn:
        return workers_sql.list_workers(conn)


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class HelixDBOS:
    """The agent executor on DBOS.

    Construct it with every agent before `launch()`: recovered runs find their
    agent by name. With no `database_url` and no HELIX_DATABASE_URL an embedded
    PostgreSQL starts in `./.helix/pgdata`.
    """

    def __init__(
        self,
        agents: Iterable[Agent] = (),
        *,
        database_url: str | None = None,
        llm: LLMAdapter | None = None,
        app_name: str = "helix_dbos",
        application_version: str | None = None,
        executor_id: str | None = None,
        data_dir: str | None = None,
        pool_size: int = 10,
        approval_timeout_seconds: float = 7 * 24 * 3600,
        client_tool_timeout_seconds: float = 600,
        database_outage_seconds: float = DEFAULT_OUTAGE_SECONDS,
        connection_timeout_seconds: float = CHECKOUT_TIMEOUT_SECONDS,
        reconcile_seconds: float = 60,
        executes_runs: bool = True,
        worker_lease_seconds: float | None = None,
        queues: Sequence[RunQueue] = (),
        listen_queues: Iterable[str] = (),
    ) -> None:
        if pool_size < 1:
            raise ValueError("pool_size must be at least 1")
        self.lease: WorkerLease | None = None  # taken by launch()
        self.agents: dict[str, Agent] = {}
        for agent in agents:
            self.register(agent)
        self.database_url = resolve_database_url(database_url, data_dir=data_dir)
        ensure_database_exists(self.database_url)
        apply_migrations(self.database_url)
        if not dbos_internals.is_launched():
            # DBOS's tables up to date before anything here reads them (the lease's first
            # claim, at launch): on an empty database, workers started together would
            # otherwise read a table that another one's DBOS launch is still migrating.
            # DBOS serializes this under its own lock; once current it is one query.
            DBOS.migrate(libpq_url(self.database_url))
        self.application_version = application_version or os.environ.get(
            "HELIX_APP_VERSION", DEFAULT_APP_VERSION
        )
        self._configure_dbos(app_name, executor_id)
        # Two pools: psycopg's, of up to 2 * pool_size connections, for the statements of
        # every run and step; SQLAlchemy's, of pool_size, for transactions (see
        # `store.statement_pool`).
        engine = create_async_engine(
            sqlalchemy_url(self.database_url),
            # Up to pool_size connections, one kept: the others close when given back,
            # so an idle process holds no more than it needs.
            pool_size=1,
            max_overflow=pool_size - 1,
            connect_args={"fallback_application_name": ENGINE_APPLICATION_NAME},
            # Under a burst (a thousand runs resuming at once) wait for a connection;
            # failing a durable run because the pool was busy would be worse.
            pool_timeout=600,
        )
        self._engine = engine
        statement_pool = StatementPool(
            libpq_url(self.database_url), 2 * pool_size, connection_timeout_seconds
        )
        self._start_slots = asyncio.Semaphore(pool_size)  # see _open_and_start_locked
        # Workflows started and running in this process, by id: a caller awaits its task.
        self._local_runs: dict[str, asyncio.Future[Any]] = {}
        self.runtime = Runtime(
            agents=self.agents,
            engine=engine,
            statement_pool=statement_pool,
            datasource=_create_datasource(sqlalchemy_url(self.database_url), engine),
            llm=llm,
            adapter_factory=_provider_adapter,
            approval_timeout_seconds=approval_timeout_seconds,
            client_tool_timeout_seconds=client_tool_timeout_seconds,
            database_outage_seconds=database_outage_seconds,
            connection_timeout_seconds=connection_timeout_seconds,
        )
        self.runtime.notifier = self._chunk_notifier
        set_runtime(self.runtime)
        self._notifier: ChunkNotifier | None = None
        self._closing: set[asyncio.Task[None]] = set()  # closes under way (see shutdown)
        self._sweep: asyncio.Task[None] | None = None
        self.reconcile_seconds = reconcile_seconds
        self._chunk_reads = SharedChunkReads(self._load_chunks)
        self.worker_lease_seconds = worker_lease_seconds or float(
            os.environ.get("HELIX_WORKER_LEASE_SECONDS", DEFAULT_LEASE_SECONDS)
        )
        self.dispatch = Dispatch(queues, executes_runs=executes_runs, listen_queues=listen_queues)

    @property
    def executes_runs(self) -> bool:
        """Whether this process executes runs (a worker) or only enqueues them (a web
        front); set before `launch()`."""
        return self.dispatch.executes_runs

    @executes_runs.setter
    def executes_runs(self, value: bool) -> None:
        if self.lease is not None:
            raise RuntimeError("executes_runs is set before launch()")
        self.dispatch.executes_runs = value

    # --- set-up -------------------------------------------------------------

    def register(self, agent: Agent) -> None:
        existing = self.agents.get(agent.name)
        if existing is not None and existing is not agent:
            raise ValueError(f"Another agent named '{agent.name}' is already registered")
        self.agents[agent.name] = agent
        if self.lease is not None and existing is None:  # registered after launch
            self.dispatch.register_agent(agent.name)
            if self.executes_runs:
                self.lease.serve(agent.name)

    def _configure_dbos(self, app_name: str, executor_id: str | None) -> None:
        if dbos_internals.is_configured():
            return  # the application configured DBOS itself
        config: DBOSConfig = {
            "name": app_name,
            "system_database_url": libpq_url(self.database_url),
            "application_version": self.application_version,
            "log_level": os.environ.get("HELIX_LOG_LEVEL", "WARNING"),
            # No ping before each system-database call (a round trip per DBOS operation,
            # four per step): DBOS retries an operation whose connection was lost.
            # DBOS's pool, of up to 20 as DBOS sizes it, keeps 2 connections (besides its
            # LISTEN one): the others close when given back, so an idle worker holds what
            # its queue and scheduler threads use, not what its launch burst opened.
            "db_engine_kwargs": {
                "pool_pre_ping": False,
                "pool_size": DBOS_POOL_KEPT,
                "max_overflow": DBOS_POOL_MAX - DBOS_POOL_KEPT,
                "pool_timeout": 30,
                "connect_args": {"application_name": "dbos_transact", "connect_timeout": 10},
            },
            # DBOS's default: half its pool (its pool_size, 2 here, would give 1).
            "sys_db_polling_concurrency": DBOS_POOL_MAX // 2,
        }
        config["executor_id"] = (
            executor_id
            or os.environ.get("HELIX_EXECUTOR_ID")
            or os.environ.get("DBOS__VMID")
            or default_executor_id()
        )
        DBOS(config=config)

    def launch(self) -> None:
        """Take this worker's lease, launch DBOS, and start heartbeating.

        The executor id is refused while another live process heartbeats under it. This
        worker's own unfinished runs (a restart under a stable id) and, from then on, the
        runs of any worker that dies (its lease lapses, or its connection closes and it
        misses two heartbeats, or it ran on this host and its pid is gone) are handed back
        to the queues and resume on a
        worker that serves their agent; runs whose start was cut short by a crash are
        closed as failed."""
        self.dispatch.check_agents(self.agents)
        if self.executes_runs:
            self.runtime.check_agents(list(self.agents.values()))
        identity = self._worker_identity()
        lease = WorkerLease(self.database_url, identity)
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
            self.dispatch.register(self.agents)
        except BaseException:
            self.runtime.lease_check = no_lease
            lease.stop()
            raise
        self.lease = lease
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # from sync code: start it on the loop DBOS runs workflows on
            self._sweep = run_sync(self._start_reconciler)
        else:  # launched from async code, on the loop DBOS adopted
            self._sweep = loop.create_task(self._reconcile_forever())

    async def _start_reconciler(self) -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(self._reconcile_forever())

    def _worker_identity(self) -> WorkerIdentity:
        return WorkerIdentity(
            executor_id=DBOS.executor_id,
            application_name=dbos_internals.app_name(),
            application_version=DBOS.application_version,
            host=socket.gethostname(),
            pid=os.getpid(),
            agents=tuple(sorted(self.agents)) if self.executes_runs else (),
            executes_runs=self.executes_runs,
            lease_seconds=self.worker_lease_seconds,
        )

    def _hand_back_own_runs(self, me: WorkerIdentity, predecessor: str | None) -> None:
        """Before DBOS's startup recovery: this executor's pending runs (its previous
        life's, under a stable executor id) go to their agents' queues (DBOS would put
        them on its internal queue, which every process dequeues, whether or not it
        serves the agent)."""
        with connect(self.database_url, autocommit=True) as conn:
            moved = workers_sql.requeue_pending(
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
            return await repo.owns_workflow(conn, workflow_id, owner_xid)

    def _listen(self, me: WorkerIdentity) -> None:
        """Dequeue only the runs of agents this process serves, plus the queues it was
        told to listen to; an application that chose its own queues keeps its choice."""
        if dbos_internals.listening_queues() is not None:
            return
        DBOS.listen_queues(self.dispatch.listen_list(me.agents))

    async def workers(self) -> list[WorkerRow]:
        """Every worker that ever registered on this database, live first."""
        return await asyncio.to_thread(_list_workers, self.database_url)

    def shutdown(self) -> None:
        """Stop this process's part: helix's connections, DBOS, the worker lease.

        Called on helix's own event loop, the connections close in tasks on that loop,
        which finish only if the loop keeps running; async code should `await
        shutdown_async()`, which closes them before it returns."""
        if self._sweep is not None:  # first: it would open the statement pool again
            with contextlib.suppress(RuntimeError):  # its loop is closed already
                self._sweep.get_loop().call_soon_threadsafe(self._sweep.cancel)
            self._sweep = None
        if self._notifier is not None:
            self._close_on_target_loop(self._notifier.stop)
            self._notifier = None
        self._close_on_target_loop(self.runtime.statement_pool.close)
        set_runtime(None)
        DBOS.destroy(destroy_registry=False)
        if self.lease is not None:
            self.lease.stop()
            self.lease = None

    async def shutdown_async(self) -> None:
        """`shutdown()` for async code (a FastAPI lifespan, the end of `asyncio.run`): it
        runs in a worker thread, so helix's connections are closed on their loop before it
        returns, and DBOS's teardown does not block the loop meanwhile."""
        await asyncio.to_thread(self.shutdown)

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

    # --- runs ---------------------------------------------------------------

    def _agent(self, agent: Agent | str) -> Agent:
        name = agent if isinstance(agent, str) else agent.name
        if name not in self.agents:
            raise AgentNotRegisteredError(name, list(self.agents))
        return self.agents[name]

    async def execute(
        self,
        agent: Agent | str,
        input: str | None = None,
        *,
        session_id: str | None = None,
        state: Any = None,
        terminating: TerminatingConfig | None = None,
        priority: int | None = None,
    ) -> RunHandle:
        """Start a run: a new session, or a new turn of an existing one.

        `terminating` runs it in seed 004's autonomous mode: the named tools end
        the run, and the result carries `response` and `generated_messages`.
        The run executes in this process, or is enqueued for a worker (see
        `Dispatch`); `priority` (1 first, up to 2**31-1; unset runs before any) enqueues
        it on its agent's queue.
        """
        check_storable(input=input, session_id=session_id)
        check_priority(priority)
        definition = self._agent(agent)
        if self.executes_runs:  # the environment may have changed since launch()
            self.runtime.check_agents([definition])
        initial_state = definition.initial_state(state) if state is not None else None
        check_storable(state=initial_state)
        messages = [Message(role="user", content=input)] if input is not None else []
        if terminating is not None:
            definition.check_terminating(terminating)
        options = RunOptions(terminating=terminating)
        began = time.monotonic()
        try:
            return await self._open_and_start(
                definition, session_id, messages, initial_state, options, priority
            )
        except Exception as exc:
            if DBOS.workflow_id is not None or not is_transient_db_error(exc):
                raise  # inside a run, the outage code waits it out
            waited = round(time.monotonic() - began, 1)
            cause = str(exc)
            if isinstance(exc, PoolTimeout):  # it says only that it waited
                cause = await self.runtime.statement_pool.why_unavailable()
            raise DatabaseUnavailableError("execute()", waited, cause) from exc

    async def _open_and_start(
        self,
        agent: Agent,
        session_id: str | None,
        messages: list[Message],
        state: dict[str, Any] | None,
        options: RunOptions | None = None,
        priority: int | None = None,
    ) -> RunHandle:
        options = options or RunOptions()
        effective = RunOptions(terminating=run_terminating(agent, options))
        request = OpenRunRequest(
            run_id=new_id("run"),
            options=options,
            stored_options=effective.to_json(),
            agent_name=agent.name,
            session_id=session_id,
            messages=messages,
            state=state,
            default_state=agent.initial_state(None),
            max_steps=agent.max_steps,
        )
        opened = await on_target_loop(lambda: self._open_and_start_locked(request, agent, priority))
        return RunHandle(self, opened.session_id, opened.run_id, opened.workflow_id)

    async def _open_and_start_locked(
        self, request: OpenRunRequest, agent: Agent, priority: int | None
    ) -> OpenedRun:
        """Open the run and start its workflow under the run's start lock (a new
        session's run started here: both at once, see `_open_while_starting`).

        No other process can then take the run for stale between the two (two
        concurrent starts on one session: exactly one wins). A process killed between
        them leaves a live row whose lock is free, which `_close_if_stale` closes.

        A start holds its lock connection (from the statement pool) until its workflow
        has started, so at most `pool_size` starts (half that pool) hold a lock at once:
        a burst of starts leaves the runs under way connections for their steps.
        """
        async with self._start_slots, self.runtime.statements() as lock:
            new_session = request.session_id is None and DBOS.workflow_id is None
            if not new_session:
                await repo.lock_run_start(lock, request.run_id)
            task: asyncio.Future[Any] | None
            try:
                if new_session and self.dispatch.starts_here(agent, priority):
                    opened, task = await self._open_while_starting(lock, request, agent)
                else:
                    if new_session:  # one statement, which takes the lock as well
                        opened = _new_session_ids(request)
                        await _open_new_session_run(lock, request, opened)
                    else:
                        opened = await self._open(request)
                    task = await self._start(opened, agent, request.options, priority)
                if task is not None:
                    self._local_runs[opened.workflow_id] = task
                    task.add_done_callback(lambda _: self._local_runs.pop(opened.workflow_id, None))
            finally:
                failed = sys.exc_info()[1] is not None
                try:
                    await repo.unlock_run_start(lock, request.run_id)
                except BaseException:
                    await lock.discard()  # never return a connection that holds the lock
                    if not failed:  # else the first error is the one the caller sees
                        raise
        return opened

    async def _start(
        self, opened: OpenedRun, agent: Agent, options: RunOptions, priority: int | None
    ) -> asyncio.Future[Any] | None:
        """Start the opened run's workflow here (its task) or enqueue it (None)."""
        return await self.dispatch.start(
            opened.workflow_id, opened.run_id, opened.session_id, agent, options, priority
        )

    async def _open_while_starting(
        self, lock: repo.Executor, request: OpenRunRequest, agent: Agent
    ) -> tuple[OpenedRun, asyncio.Future[Any]]:
        """Open a new session's run and start its workflow here at the same time: the
        open's round trip hides behind DBOS's own start instead of adding to it.

        The workflow waits for the open (`Runtime.wait_opened`) before its first step,
        and its first step reads nothing (the open's rows are seeded in this process's
        history cache). The start lock is taken inside the open's statement, so whoever
        sees the live run row also sees it locked until both are done, as in the
        sequential path. If the open fails, the error goes to the caller and the
        workflow's first step, which then reads the run from the database, finds no row
        (`RunNotOpened`) and ends without asking the model or writing anything; so does
        a workflow recovered after the process died between DBOS's commit and the
        open's. A run whose workflow failed to start is closed like any other
        (`_close_if_stale`).
        """
        opened = _new_session_ids(request)
        history = self.runtime.history
        history.seed_new_run(
            opened.session_id, opened.run_id, request.messages, request.new_session_state
        )
        write = asyncio.ensure_future(_open_new_session_run(lock, request, opened))
        self.runtime.opening(opened.run_id, write)
        try:
            await asyncio.sleep(0)  # the open's statement goes out first, then DBOS's start
            task = await self._start(opened, agent, request.options, None)
        except BaseException:
            self.runtime.forget_opening(opened.run_id)
            history.take_new_run(opened.session_id, opened.run_id)
            await asyncio.wait({write})  # done before the lock is released
            raise
        assert task is not None
        try:
            await asyncio.shield(write)
        except BaseException:  # the open failed, or the caller was cancelled
            await asyncio.wait({write})  # done before the lock is released
            raise
        return opened, task

    async def _open(self, request: OpenRunRequest) -> OpenedRun:
        try:
            return await self.runtime.transaction("helix.open_run", _open_run, request)
        except AgentAlreadyRunningError as exc:
            if DBOS.workflow_id is not None or exc.run_id is None:
                raise
            if not await self._close_if_stale(exc.run_id):
                raise
            return await self.runtime.transaction("helix.open_run", _open_run, request)

    async def _close_if_stale(self, run_id: str) -> bool:
        """Close a live run whose workflow never started (and nobody is starting it) or
        already ended; returns whether it did. Runs on the target loop."""
        run = await self.get_run(run_id)
        async with self.runtime.engine.begin() as conn:
            if not await repo.run_start_settled(conn, run_id):
                return False  # a process is starting it right now
            status = await DBOS.get_workflow_status_async(run.workflow_id)
            if status is not None and status.status not in _DBOS_TERMINAL:
                return False
            ended_as: str = "aborted" if status and status.status == "CANCELLED" else "failed"
            error = _stale_reason(status)
            # Only a run still live is closed: one whose workflow wrote its end after the
            # caller looked (a run that ended in the meantime) is left alone, and unlogged.
            closed = await close_run(conn, run.session_id, run.run_id, error, ended_as)
            if closed:
                logger.warning(
                    "Closed run %s of session %s as %s: %s",
                    run.run_id,
                    run.session_id,
                    ended_as,
                    error,
                )
            return closed

    async def reconcile_runs(self) -> list[str]:
        """Close every live run whose workflow ended without closing it (cancelled from
        outside, failed in a way the run could not record) or never started (its starter
        was killed between opening and starting it): `failed`, or `aborted` for a
        cancelled workflow, with a readable error. Returns the closed run ids.

        `launch()` runs it once and then every `reconcile_seconds`; a caller waiting for
        a result runs it for its own run."""
        rows = await self._read(repo.live_runs_with_ended_workflow)
        closed: list[str] = []
        for run_id in rows:
            if await on_target_loop(functools.partial(self._close_if_stale, run_id)):
                closed.append(run_id)
        return closed

    async def _reconcile_forever(self) -> None:
        while True:
            try:
                await self.reconcile_runs()
            except Exception as exc:  # a database outage: try again next time
                logger.warning("helix could not reconcile runs: %s", exc)
            await asyncio.sleep(self.reconcile_seconds)

    def execute_sync(
        self, agent: Agent | str, input: str | None = None, **kwargs: Any
    ) -> RunHandle:
        return run_sync(lambda: self.execute(agent, input, **kwargs))

    async def get_handle(self, run_id: str) -> RunHandle:
        """A handle on an existing run, for example after a restart."""
        run = await self.get_run(run_id)
        return RunHandle(self, run.session_id, run.run_id, run.workflow_id)

    # --- human in the loop and run control ------------------------------------

    async def approve(
        self,
        session_id: str,
        tool_call_id: str,
        approved: bool = True,
        *,
        reason: str | None = None,
    ) -> None:
        """Answer an approval request; the tool runs with its original input if approved."""
        await self._answer(
            session_id,
            tool_call_id,
            "approval",
            {"tool_call_id": tool_call_id, "approved": approved, "reason": reason},
        )

    async def deny(self, session_id: str, tool_call_id: str, *, reason: str | None = None) -> None:
        await self.approve(session_id, tool_call_id, False, reason=reason)

    async def submit_tool_result(
        self, session_id: str, tool_call_id: str, result: Any = None, *, error: str | None = None
    ) -> None:
        """Hand in a client-executed tool's result (or its error)."""
        if result is not None and error is not None:
            raise InvalidAnswerError("Give either result or error, not both")
        payload: dict[str, Any] = {"tool_call_id": tool_call_id}
        if error is not None:
            payload["error"] = error
        else:
            payload["result"] = result
        await self._answer(session_id, tool_call_id, "client", payload)

    async def submit_human_input(
        self,
        session_id: str,
        tool_call_id: str,
        human_input: str | None = None,
        *,
        approved: bool | None = None,
    ) -> None:
        """Answer a `__pause_for_human__` question."""
        payload = {"tool_call_id": tool_call_id, "human_input": human_input, "approved": approved}
        await self._answer(session_id, tool_call_id, "human_input", payload)

    async def _answer(
        self, session_id: str, tool_call_id: str, kind: GateKind, payload: dict[str, Any]
    ) -> None:
        """Check the call is pending and of this kind, then send the answer exactly once."""
        check_storable(session_id=session_id, tool_call_id=tool_call_id, answer=payload)
        try:
            ANSWER_MODELS[kind].model_validate(payload)
        except ValidationError as exc:
            log_event(
                gate_event(kind, "validation_failed"),
                logging.WARNING,
                session_id=session_id,
                tool_call_id=tool_call_id,
                error=str(exc),
            )
            raise InvalidAnswerError(
                f"Malformed answer for tool call '{tool_call_id}': {exc}"
            ) from exc

        async def tx() -> repo.ToolCallRow:
            async with self.runtime.engine.begin() as conn:
                row = await repo.find_tool_call(conn, session_id, tool_call_id, for_update=True)
                if row is None:
                    if await repo.get_session(conn, session_id) is None:
                        raise SessionNotFoundError(session_id)
                    raise ToolCallNotFoundError(session_id, tool_call_id)
                if row.kind != kind:
                    use = {
                        "approval": "approve()/deny()",
                        "client": "submit_tool_result()",
                        "human_input": "submit_human_input()",
                    }[row.kind]
                    raise InvalidAnswerError(
                        f"Tool call '{tool_call_id}' waits for {row.kind.replace('_', ' ')}; answer it with {use}"
                    )
                if row.status != "pending" or row.answered_at is not None:
                    raise ToolCallAlreadyAnsweredError(
                        tool_call_id, row.status if row.status != "pending" else "answered"
                    )
                await self._check_client_result(conn, row, payload)
                await repo.mark_answered(conn, row.run_id, tool_call_id)
                await DBOS.send_async(
                    row.workflow_id,
                    payload,
                    TOPICS[kind],
                    idempotency_key=f"{row.run_id}:{tool_call_id}",
                )
                return row

        row = await on_target_loop(tx)
        action = "submitted"
        if kind == "approval":
            action = "approved" if payload.get("approved") else "denied"
        log_event(
            gate_event(kind, action),
            session_id=session_id,
            run_id=row.run_id,
            tool_call_id=tool_call_id,
            tool_name=row.tool_name,
            error=payload.get("error"),
            reason=payload.get("reason"),
        )

    async def _check_client_result(
        self, conn: repo.Executor, row: repo.ToolCallRow, payload: dict[str, Any]
    ) -> None:
        """A client tool's result must match its `output_schema`: a mismatch is refused
        here (nothing stored, the run keeps waiting for a valid result). The run checks
        again, for answers sent around this API (a raw DBOS.send, the CLI)."""
        if row.kind != "client" or payload.get("error") is not None:
            return
        run = await repo.get_run(conn, row.run_id)
        agent = self.agents.get(run.agent_name) if run is not None else None
        tool = agent.tool(row.tool_name) if agent is not None else None
        if tool is None:  # not defined in this process: the run checks it
            return
        try:
            tool.check_client_result(payload.get("result"))
        except ToolOutputError as exc:
            log_event(
                gate_event("client", "validation_failed"),
                logging.WARNING,
                session_id=row.session_id,
                run_id=row.run_id,
                tool_call_id=row.tool_call_id,
                tool_name=row.tool_name,
                error=str(exc),
            )
            raise InvalidAnswerError(str(exc)) from exc

    async def pending_tool_calls(self, session_id: str) -> list[dict[str, Any]]:
        """Calls waiting for a human in the session and in every session below it (its
        sub-agents' and companions', theirs): id, tool, kind, input, deadline, and the
        session, agent and depth (0: this session) whose run waits. Answer any of them
        through the root session (seed 002)."""
        await self.get_session(session_id)
        rows = await self._read(tree.pending_calls, session_id)
        return [
            {
                "tool_call_id": r.tool_call_id,
                "tool_name": r.tool_name,
                "kind": r.kind,
                "input": r.input,
                "run_id": r.run_id,
                "deadline_at": r.deadline_at,
                "answered": r.answered_at is not None,
                "session_id": r.session_id,
                "agent_name": r.agent_name,
                "depth": r.depth,
            }
            for r in rows
        ]

    async def interrupt(self, session_id: str, *, reason: str | None = None) -> list[str]:
        """Stop the live run of the session and of every session below it (sub-agents,
        companions, theirs), whether or not the session itself has one: each ends
        `interrupted`, at its next step boundary, or at once when it waits for a human,
        whose pending calls get an "Interrupted" result. `resume()` continues a session.
        Returns the run ids reached, the session's own first; `RunNotActiveError` when
        no run of the tree is live."""
        check_storable(reason=reason)
        runs = await self._live_tree(session_id)
        for run in runs:
            # Below the session: one opened but not started yet gets the interrupt from
            # its parent once started (`helix.children_started`).
            with contextlib.suppress(*_gone(run, session_id)):
                await on_target_loop(functools.partial(self._send_interrupt, run, reason))
        return [r.run_id for r in runs]

    async def _send_interrupt(self, run: TreeRun, reason: str | None) -> None:
        await DBOS.send_async(
            run.workflow_id,
            {"reason": reason},
            INTERRUPT_TOPIC,
            idempotency_key=f"{run.run_id}:interrupt",
        )
        # After that send: a run that suspends later sees it; one already waiting
        # gets a notice on each topic it waits on.
        kinds = await self.runtime.read(repo.pending_kinds, run.run_id)
        await self._notify_waits(run, kinds, reason)

    async def abort(self, session_id: str, *, reason: str | None = None) -> list[str]:
        """Cancel the live run of the session and of every session below it now, whether
        or not the session itself has one: each workflow is cancelled (top down, so no
        parent sees its child end first), running tools are stopped (see
        `ToolContext.cancelled`), a wait for a human ends, and dangling tool calls get
        error results so each session continues. Returns the run ids reached, the
        session's own first; `RunNotActiveError` when no run of the tree is live."""
        check_storable(reason=reason)
        runs = await self._live_tree(session_id)
        for run in runs:
            with contextlib.suppress(*_gone(run, session_id)):
                await on_target_loop(functools.partial(DBOS.cancel_workflow_async, run.workflow_id))
        for run in runs:
            await self._close_aborted(run, reason)
        return [r.run_id for r in runs]

    async def _close_aborted(self, run: TreeRun, reason: str | None) -> None:
        session_id = run.session_id
        error = f"Run aborted: {reason}" if reason else "Run aborted"
        # Read before the close marks them aborted: the calls a waiting run waits on.
        pending = [
            r
            for r in await self._read(repo.pending_tool_calls, session_id)
            if r.run_id == run.run_id
        ]
        waits = sorted({cast(GateKind, r.kind) for r in pending})
        closed = await on_target_loop(
            lambda: self.runtime.transaction(
                "helix.abort_run", close_run, session_id, run.run_id, error, "aborted"
            )
        )
        if not closed:  # it ended meanwhile
            return
        ids: dict[str, Any] = {"session_id": session_id, "run_id": run.run_id}
        for r in pending:
            log_event(
                gate_event(r.kind, "aborted"),
                logging.WARNING,
                tool_call_id=r.tool_call_id,
                tool_name=r.tool_name,
                reason=reason,
                cause="aborted",
                **ids,
            )
        log_event(RUN_ABORTED, logging.WARNING, reason=reason, agent_name=run.agent_name, **ids)
        await on_target_loop(lambda: emit_run_span(self.runtime, run.run_id))
        self.runtime.history.forget(session_id)
        # Wake a wait for a human so the cancelled workflow's coroutine ends now, not at
        # its deadline (the tool steps stop on the run-end notification of the close).
        await on_target_loop(lambda: self._notify_waits(run, waits, reason))

    async def _live_tree(self, session_id: str) -> list[TreeRun]:
        """The live runs of the session's tree, top down (its own first, if live)."""
        runs = await self._read(tree.live_runs, session_id)
        if not runs:
            await self.get_session(session_id)  # SessionNotFoundError first
            raise RunNotActiveError(
                f"Session '{session_id}' has no run in progress, nor has any session below it"
            )
        return runs

    async def _notify_waits(self, run: TreeRun, kinds: list[GateKind], reason: str | None) -> None:
        for kind in kinds:
            await DBOS.send_async(
                run.workflow_id,
                {"interrupt": True, "reason": reason},
                TOPICS[kind],
                idempotency_key=f"{run.run_id}:interrupt:{kind}",
            )

    async def resume(self, session_id: str, message: str | None = None) -> RunHandle:
        """Continue an interrupted (or otherwise ended) session in a new run."""
        check_storable(message=message)
        session = await self.get_session(session_id)
        messages = [Message(role="user", content=message)] if message is not None else []
        return await self._open_and_start(
            self._agent(session.agent_name), session_id, messages, None
        )

    async def retry(self, session_id: str) -> RunHandle:
        """Run a failed session again, with a fresh step budget and its history intact."""
        session = await self.get_session(session_id)
        if session.status not in ("failed", "aborted", "interrupted"):
            raise RunNotActiveError(
                f"Session '{session_id}' is {session.status}; only a failed, aborted or interrupted run can be retried"
            )
        return await self._open_and_start(self._agent(session.agent_name), session_id, [], None)

    def approve_sync(
        self,
        session_id: str,
        tool_call_id: str,
        approved: bool = True,
        *,
        reason: str | None = None,
    ) -> None:
        run_sync(lambda: self.approve(session_id, tool_call_id, approved, reason=reason))

    def submit_tool_result_sync(
        self, session_id: str, tool_call_id: str, result: Any = None, *, error: str | None = None
    ) -> None:
        run_sync(lambda: self.submit_tool_result(session_id, tool_call_id, result, error=error))

    def interrupt_sync(self, session_id: str, *, reason: str | None = None) -> list[str]:
        return run_sync(lambda: self.interrupt(session_id, reason=reason))

    def abort_sync(self, session_id: str, *, reason: str | None = None) -> list[str]:
        return run_sync(lambda: self.abort(session_id, reason=reason))

    def resume_sync(self, session_id: str, message: str | None = None) -> RunHandle:
        return run_sync(lambda: self.resume(session_id, message))

    # --- streaming -------------------------------------------------------------

    async def stream(
        self,
        session_id: str,
        *,
        after_seq: int = 0,
        run_id: str | None = None,
        follow: bool = True,
        poll_seconds: float = 5.0,
    ) -> AsyncIterator[StreamChunk]:
        """Chunks of a session (or of one run) after `after_seq`, then live ones.

        Live readers sleep on LISTEN/NOTIFY; `poll_seconds` is only the safety net.
        With `follow`, the stream ends after the run's terminal chunk (or, for a
        whole session, once no run is live and every chunk was delivered).
        """
        await self.get_session(session_id)
        notifier = await on_target_loop(self._chunk_notifier)
        last = after_seq
        while True:
            seen = notifier.version(session_id)
            rows = await on_target_loop(
                functools.partial(self._chunk_reads.load, session_id, last, run_id)
            )
            ended = False
            for chunk in rows:
                last = chunk.seq
                yield chunk
                if chunk.run_id == run_id and chunk.type in TERMINAL_CHUNK_TYPES:
                    ended = True
            if ended or not follow:
                return
            if len(rows) >= 500:
                continue
            # A run's stream ends on its terminal chunk, so a wake-up that brought rows
            # needs no status query; the check only matters when nothing new arrived.
            fresh = bool(rows) and run_id is not None
            if not fresh and await self._stream_finished(session_id, run_id):
                if not await self._read(
                    repo.load_chunks, session_id, after_seq=last, run_id=run_id
                ):
                    return
                continue
            await on_target_loop(functools.partial(notifier.wait, session_id, seen, poll_seconds))

    async def wait_for_run_end(
        self, session_id: str, run_id: str, *, poll_seconds: float = 5.0
    ) -> RunInfo:
        """Wait, on LISTEN/NOTIFY, until the run's row reaches a final status."""
        outcome = await self._wait_for_outcome(session_id, run_id, poll_seconds)
        return RunInfo(**outcome.run.__dict__)

    async def wait_for_result(
        self, session_id: str, run_id: str, workflow_id: str, *, poll_seconds: float = 5.0
    ) -> AgentResult:
        """The run's result, usage included.

        A workflow started and running in this process is awaited directly (its task
        ends once DBOS has recorded its end, so no poll); any other run's result is read
        from its row once the run announces its end.
        """
        task = self._local_runs.get(workflow_id)
        if task is not None:

            async def ended() -> Any:
                return await asyncio.shield(task)

            with contextlib.suppress(Exception):  # cancelled or crashed: read the row
                result = await on_target_loop(ended)
                if isinstance(result, AgentResult):  # usage included: the last write read it
                    return result.model_copy()  # each caller its own (the task's is shared)
        return run_result(await self._wait_for_outcome(session_id, run_id, poll_seconds))

    async def _wait_for_outcome(
        self, session_id: str, run_id: str, poll_seconds: float
    ) -> RunOutcome:
        """Sleep on the run's end notification (not on every chunk, so a waiting caller
        costs the run nothing while it works) until its row is final.

        Only a wait that no notification ended asks DBOS whether the workflow ended
        without closing the run (or never started): the first after a second at most,
        then one every `poll_seconds`.
        """
        notifier = await on_target_loop(self._chunk_notifier)
        key = run_end_key(run_id)
        timeout, woken = min(poll_seconds, 1.0), True
        while True:
            seen = notifier.version(key)
            outcome = await self._read(run_bounds.run_outcome, run_id)
            if outcome is None:
                raise RunNotFoundError(run_id)
            if outcome.run.status in TERMINAL_STATUSES:
                await self._workflow_settled(outcome.run.workflow_id)
                return outcome
            if not woken:
                status = await DBOS.get_workflow_status_async(outcome.run.workflow_id)
                ended = status is None or status.status in _DBOS_TERMINAL
                if ended and await on_target_loop(lambda: self._close_if_stale(run_id)):
                    continue  # its workflow ended (or never started) without closing it
                timeout = poll_seconds
            await on_target_loop(functools.partial(notifier.wait, key, seen, timeout))
            woken = notifier.version(key) > seen

    async def _workflow_settled(self, workflow_id: str, *, timeout: float = 1.0) -> None:
        """Wait for DBOS to record the end of a workflow whose run's row has ended.

        The run's last write wakes its waiters with its commit, and the workflow's end
        commits a moment later: a caller then finds DBOS's status ended too, as the local
        caller (who awaits the workflow's task) always does. The row stays the result's
        source: a workflow that does not end within `timeout` (its end hook still
        running, say) is not waited for any longer.
        """
        deadline, pause = time.monotonic() + timeout, 0.002
        while True:
            status = await on_target_loop(lambda: DBOS.get_workflow_status_async(workflow_id))
            if status is None or status.status in _DBOS_TERMINAL:
                return
            if time.monotonic() >= deadline:
                return
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.1)

    async def _load_chunks(
        self, session_id: str, after_seq: int, run_id: str | None
    ) -> list[StreamChunk]:
        rows = await self.runtime.read(
            functools.partial(repo.load_chunks, after_seq=after_seq, run_id=run_id), session_id
        )
        return [StreamChunk.from_row(row) for row in rows]

    async def _stream_finished(self, session_id: str, run_id: str | None) -> bool:
        if run_id is not None:
            return (await self.get_run(run_id)).status in TERMINAL_STATUSES
        return await self._read(repo.get_live_run, session_id) is None

    async def _chunk_notifier(self) -> ChunkNotifier:
        if self._notifier is None:
            self._notifier = ChunkNotifier(
                libpq_url(self.database_url),
                on_lost=self.runtime.statement_pool.connections_lost,
                on_back=lambda: asyncio.to_thread(dbos_internals.recheck_message_waiters),
            )
            await self._notifier.start()
        return self._notifier

    # --- reads --------------------------------------------------------------

    async def _read(
        self,
        func: Callable[Concatenate[repo.Executor, P], Coroutine[Any, Any, T]],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        return await on_target_loop(lambda: self.runtime.read(func, *args, **kwargs))

    async def sql(self, statement: str, params: Mapping[str, Any] | None = None) -> list[Row[Any]]:
        """Run your own SQL on helix's database (its tables, views, your own), in a
        transaction of its own on helix's pool: the rows, by name (`row.run_id`) or by
        position, or [] for a statement that returns none. Parameters are named,
        `WHERE agent_name = :agent` with `{"agent": "janitor"}`. Callable from any event
        loop once launched (the pool lives on DBOS's loop; this hops there and back)."""

        async def run() -> list[Row[Any]]:
            async with self.runtime.engine.begin() as conn:
                result = await conn.execute(text(statement), dict(params or {}))
                return list(result.all()) if result.returns_rows else []

        return await on_target_loop(run)

    async def get_session(self, session_id: str) -> SessionInfo:
        check_storable(session_id=session_id)
        row = await self._read(repo.get_session, session_id)
        if row is None:
            raise SessionNotFoundError(session_id)
        return SessionInfo(
            session_id=row.session_id,
            agent_name=row.agent_name,
            status=row.status,
            state=row.state,
            output=row.output,
            error=row.error,
            parent_session_id=row.parent_session_id,
            turn_count=row.turn_count,
        )

    async def get_messages(self, session_id: str) -> list[Message]:
        await self.get_session(session_id)
        rows = await self._read(repo.load_messages, session_id)
        return [m for _, m in rows]

    async def get_run_messages(self, run_id: str) -> list[Message]:
        """The messages a run added to its session's transcript."""
        run = await self.get_run(run_id)
        rows = await self._read(repo.load_messages, run.session_id)
        ids = await self._read(repo.message_seqs_of_run, run_id)
        return [m for seq, m in rows if seq in ids]

    async def get_run(self, run_id: str) -> RunInfo:
        check_storable(run_id=run_id)
        row = await self._read(repo.get_run, run_id)
        if row is None:
            raise RunNotFoundError(run_id)
        return RunInfo(**row.__dict__)

    async def get_current_run(self, session_id: str) -> RunInfo | None:
        """The live run of a session, or None when nothing is running."""
        await self.get_session(session_id)
        row = await self._read(repo.get_live_run, session_id)
        return RunInfo(**row.__dict__) if row else None

    async def list_runs(self, session_id: str) -> list[RunInfo]:
        await self.get_session(session_id)
        return [RunInfo(**r.__dict__) for r in await self._read(repo.list_runs, session_id)]

    async def get_usage(
        self,
        *,
        session_id: str | None = None,
        run_id: str | None = None,
        include_children: bool = False,
    ) -> dict[str, int]:
        """Calls and tokens of a session or run; `include_children` adds every sub-agent
        session below the session (their tokens are counted once: a `subagent` row only
        counts as a call, in `subagent_calls`)."""
        check_storable(session_id=session_id, run_id=run_id)
        return await self._read(
            repo.usage_summary,
            session_id=session_id,
            run_id=run_id,
            include_children=include_children,
        )

    def get_session_sync(self, session_id: str) -> SessionInfo:
        return run_sync(lambda: self.get_session(session_id))

    def get_messages_sync(self, session_id: str) -> list[Message]:
        return run_sync(lambda: self.get_messages(session_id))

    def list_runs_sync(self, session_id: str) -> list[RunInfo]:
        return run_sync(lambda: self.list_runs(session_id))

    def get_usage_sync(self, **kwargs: Any) -> dict[str, int]:
        return run_sync(lambda: self.get_usage(**kwargs))

    # time travel (issue 30): see runtime/time_travel.py
    def _time_travel(self) -> TimeTravel:
        return TimeTravel(self.runtime.statements, DBOS.delete_workflows_async, self.agents)

    async def get_checkpoints(self, session_id: str) -> list[Checkpoint]:
        return await on_target_loop(lambda: self._time_travel().get_checkpoints(session_id))

    async def get_checkpoint(self, session_id: str, checkpoint_id: str) -> CheckpointView:
        return await on_target_loop(
            lambda: self._time_travel().get_checkpoint(session_id, checkpoint_id)
        )

    async def fork(
        self,
        session_id: str,
        at: Checkpoint | str,
        *,
        state: Any = None,
        new_session_id: str | None = None,
    ) -> str:
        return await on_target_loop(
            lambda: self._time_travel().fork(
                session_id, at, state=state, new_session_id=new_session_id
            )
        )

    async def prune(
        self, *, older_than: timedelta, keep_last: int = 0, batch_size: int = 500
    ) -> PruneReport:
        return await on_target_loop(
            lambda: self._time_travel().prune(
                older_than=older_than, keep_last=keep_last, batch_size=batch_size
            )
        )

    def get_checkpoints_sync(self, session_id: str) -> list[Checkpoint]:
        return run_sync(lambda: self.get_checkpoints(session_id))

    def fork_sync(self, session_id: str, at: Checkpoint | str, **kwargs: Any) -> str:
        return run_sync(lambda: self.fork(session_id, at, **kwargs))

    def prune_sync(self, **kwargs: Any) -> PruneReport:
        return run_sync(lambda: self.prune(**kwargs))


# --- transactions -----------------------------------------------------------


def _gone(run: TreeRun, session_id: str) -> tuple[type[Exception], ...]:
    """What acting on a run below the session may meet: its workflow not started yet."""
    if run.session_id == session_id:
        return ()
    return (dbos_internals.DBOSNonExistentWorkflowError,)


@dataclass(frozen=True)
class OpenRunRequest:
    """What `execute`, `resume` and `retry` ask of the open-run transaction."""

    run_id: str  # chosen before the row exists, so its start lock can be taken first
    agent_name: str
    session_id: str | None
    messages: list[Message]
    state: dict[str, Any] | None  # the caller's state, if any
    default_state: dict[str, Any]  # a new session's state otherwise
    max_steps: int
    options: RunOptions

    @property
    def new_session_state(self) -> dict[str, Any]:
        """The state a session created by this run starts with."""
        return self.state or self.default_state

    # What `helix.runs.options` records: the run's effective options (the agent's
    # terminating config when the run sets none), so a caller reading the result from
    # the row knows the run's mode.
    stored_options: dict[str, Any]


@dataclass(frozen=True)
class OpenedRun:
    session_id: str
    run_id: str
    workflow_id: str
    turn: int


def _new_session_ids(request: OpenRunRequest) -> OpenedRun:
    """The ids of a run on a new session, made before anything is written."""
    run_id = request.run_id
    return OpenedRun(new_id("ses"), run_id, f"helix-{run_id}", 1)


async def _open_new_session_run(
    conn: repo.Executor, request: OpenRunRequest, opened: OpenedRun
) -> None:
    """`_open_run` for a session that cannot exist yet (its id is new), in one round
    trip that also takes the run's start lock on `conn`. Outside workflows only: a
    workflow opens its runs in an exactly-once datasource transaction."""
    await run_bounds.open_new_session_run(
        conn,
        session_id=opened.session_id,
        run_id=opened.run_id,
        workflow_id=opened.workflow_id,
        agent_name=request.agent_name,
        state=request.new_session_state,
        max_steps=request.max_steps,
        options=request.stored_options,
        messages=request.messages,
    )


async def _open_run(session: repo.Executor, request: OpenRunRequest) -> OpenedRun:
    """Create or reopen the session, refuse a second live run, add the input, insert the run."""
    agent_name = request.agent_name
    session_id = request.session_id or new_id("ses")
    row = await repo.get_session(session, session_id, for_update=True)
    if row is None:
        await repo.insert_session(session, session_id, agent_name, request.new_session_state)
        row = await repo.get_session(session, session_id, for_update=True)
        assert row is not None
    elif row.agent_name != agent_name:
        raise SessionAgentMismatchError(session_id, row.agent_name, agent_name)
    live = await repo.get_live_run(session, session_id)
    if live is not None:
        raise AgentAlreadyRunningError(session_id, live.run_id)
    run_id = request.run_id
    workflow_id = f"helix-{run_id}"
    turn = row.turn_count + 1
    await repo.insert_run(
        session,
        run_id=run_id,
        session_id=session_id,
        workflow_id=workflow_id,
        agent_name=agent_name,
        turn=turn,
        max_steps=request.max_steps,
        options=request.stored_options,
    )
    unpaired = await repo.unpaired_finish_call_ids(session, session_id)
    heal = [synthesize_finish_tool_result(call_id) for call_id in unpaired]
    await repo.append_messages(session, session_id, run_id, heal + request.messages)
    await repo.insert_chunks(
        session,
        session_id,
        run_id,
        agent_name,
        0,
        [(f"{run_id}:started", "run_started", {"turn": turn})],
    )
    fields: dict[str, Any] = {"status": "running", "turn_count": turn, "error": None}
    if request.state is not None and row.turn_count > 0:
        fields["state"] = request.state
    await repo.update_session(session, session_id, **fields)
    return OpenedRun(session_id, run_id, workflow_id, turn)


def _stale_reason(status: WorkflowStatus | None) -> str:
    """Why a live run's row is being closed from outside its workflow."""
    if status is None:
        return "Run never started"
    if status.status == "CANCELLED":
        return "Run aborted: its workflow was cancelled"
    if status.error is not None:
        return f"Run failed: its workflow ended as {status.status}: {status.error}"
    return f"Run failed: its workflow ended as {status.status} without recording its end"


def _create_datasource(url: str, engine: AsyncEngine) -> AsyncSQLAlchemyDatasource:
    """DBOS's exactly-once datasource on helix's engine (its checkpoint table in schema
    `dbos`), created and migrated before launch, as DBOS requires.

    It runs on a throwaway event loop in a thread of its own, so construction works from
    sync and async code alike, and it closes the connections it opened there, so none
    stays bound to that loop.
    """

    async def create() -> AsyncSQLAlchemyDatasource:
        try:
            return await AsyncSQLAlchemyDatasource.create(url, engine=engine, schema="dbos")
        finally:
            await engine.dispose()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, create()).result()


def _provider_adapter(agent: Agent) -> LLMAdapter:
    kwargs: dict[str, Any] = {}
    if agent.llm.base_url:
        kwargs["base_url"] = agent.llm.base_url
    return resolve_adapter(agent.llm.model, **kwargs)


__all__ = ["HelixDBOS", "TERMINAL_STATUSES"]
