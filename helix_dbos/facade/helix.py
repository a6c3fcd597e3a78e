"""`HelixDBOS`: the one object a user holds, a thin facade over modules with one job
each: `run_starts` (execute, resume, retry), `run_control` (answers, interrupt,
abort), `run_waits` (results, streams), `session_reads` (sessions, runs, usage, SQL),
`time_travel` (checkpoints, forks, pruning), `memory` (long-term memory) and
`worker_process` (DBOS's configuration, migrations, the lease, shutdown).

A new capability is a module of its own and a few lines here: an async method that
delegates, and its `_sync` twin; or, for a group of methods, a mixin of its own
(`RunControlMethods`, `SessionReadMethods`, `SessionQueueMethods`, `MemoryMethods`)
that declares the attributes it uses and carries its methods' twins; or a sub-API object
where a group reads better under its own name (`helix.schedules`, `helix.checkpoints`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

from helix_dbos.definitions.agent import Agent, TerminatingConfig
from helix_dbos.definitions.handoffs import check_handoffs_registered
from helix_dbos.definitions.queue import RunQueue
from helix_dbos.definitions.request_tools import ClientToolSpec
from helix_dbos.facade.renamed import Renamed
from helix_dbos.facade.run_control_methods import RunControlMethods
from helix_dbos.facade.session_queue_methods import SessionQueueMethods
from helix_dbos.facade.session_read_methods import SessionReadMethods
from helix_dbos.facade.time_travel_methods import Checkpoints
from helix_dbos.llm.base import LLMAdapter
from helix_dbos.memory.methods import MemoryMethods  # memory (issue 36)
from helix_dbos.orchestration.double_texting import MultitaskStrategy
from helix_dbos.orchestration.parts import UserPart
from helix_dbos.orchestration.usage_limits import UsageLimits
from helix_dbos.runtime import worker_process
from helix_dbos.runtime.children import remote_children
from helix_dbos.runtime.control.run_control import RunControl
from helix_dbos.runtime.process import model_limits
from helix_dbos.runtime.process.event_loop import sync_twin
from helix_dbos.runtime.process.outage import DEFAULT_OUTAGE_SECONDS
from helix_dbos.runtime.process.wait_parking import DEFAULT_WAITS_IN_MEMORY, WaitParking
from helix_dbos.runtime.process.workers import DEFAULT_LEASE_SECONDS, WorkerLease
from helix_dbos.runtime.sessions.handle import RunHandle
from helix_dbos.runtime.sessions.run_opening import OpenedRun, new_id
from helix_dbos.runtime.sessions.session_queue import QueuedRunHandle, SessionQueue
from helix_dbos.runtime.sessions.session_reads import SessionReads
from helix_dbos.runtime.starts.dispatch import Dispatch
from helix_dbos.runtime.starts.run_starts import RunStarts
from helix_dbos.runtime.starts.run_waits import RunWaits
from helix_dbos.runtime.steps.results import AgentResult, RunInfo
from helix_dbos.schedules.firing import install_firer
from helix_dbos.schedules.methods import Schedules  # scheduled agents (issue 34)
from helix_dbos.store.database import resolve_database_url
from helix_dbos.store.features.queued_messages import QueuedMessage
from helix_dbos.store.features.workers import WorkerRow
from helix_dbos.store.pooler import pooler_settings
from helix_dbos.store.statement_pool import CHECKOUT_TIMEOUT_SECONDS
from helix_dbos.store.storable import check_storable
from helix_dbos.streaming.chunks import StreamChunk


class HelixDBOS(
    RunControlMethods,
    SessionReadMethods,
    SessionQueueMethods,
    MemoryMethods,
):
    """Durable agents on DBOS: register agents, launch, start runs, answer, read.

    Construct it with every agent before `launch()`: recovered runs find their agent by
    name. The constructor touches no database (it configures DBOS and builds pools that
    connect on first use); `launch()` migrates first (or call `migrate()` yourself). With
    no `database_url` and no HELIX_DATABASE_URL an embedded PostgreSQL starts in
    `./.helix/pgdata` (its address is only known once it runs).

    Sync twins: every public async method has a `<name>_sync` twin for synchronous
    code, except `stream()` (an async iterator) and `shutdown_async()` (the async
    twin of `shutdown()`). The answers and reads come from the mixins, each carrying its
    own twins; schedules and checkpoints are sub-APIs (`helix.schedules.create(...)`,
    `helix.checkpoints.list(...)`), memory too (`helix.memory.search(...)`).
    """

    # The previous release's names, deprecated for one release (issue 47 item 6).
    schedule = Renamed("schedules.create")
    schedule_sync = Renamed("schedules.create_sync")
    list_schedules = Renamed("schedules.list")
    list_schedules_sync = Renamed("schedules.list_sync")
    get_schedule = Renamed("schedules.get")
    get_schedule_sync = Renamed("schedules.get_sync")
    pause_schedule = Renamed("schedules.pause")
    pause_schedule_sync = Renamed("schedules.pause_sync")
    resume_schedule = Renamed("schedules.resume")
    resume_schedule_sync = Renamed("schedules.resume_sync")
    delete_schedule = Renamed("schedules.delete")
    delete_schedule_sync = Renamed("schedules.delete_sync")
    backfill_schedule = Renamed("schedules.backfill")
    backfill_schedule_sync = Renamed("schedules.backfill_sync")
    trigger_schedule = Renamed("schedules.trigger")
    trigger_schedule_sync = Renamed("schedules.trigger_sync")
    get_schedule_firings = Renamed("schedules.firings")
    get_schedule_firings_sync = Renamed("schedules.firings_sync")
    get_checkpoints = Renamed("checkpoints.list")
    get_checkpoints_sync = Renamed("checkpoints.list_sync")
    get_checkpoint = Renamed("checkpoints.get")
    get_checkpoint_sync = Renamed("checkpoints.get_sync")
    fork = Renamed("checkpoints.fork")
    fork_sync = Renamed("checkpoints.fork_sync")
    prune = Renamed("checkpoints.prune")
    prune_sync = Renamed("checkpoints.prune_sync")

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
        waiting_runs_in_memory: int = DEFAULT_WAITS_IN_MEMORY,
        park_waiting_runs_after_seconds: float = 60,
        pooler: str | None = None,
        listen_database_url: str | None = None,
    ) -> None:
        if pool_size < 1:
            raise ValueError("pool_size must be at least 1")
        remote_children.use_a2a_transport(_a2a_transport)
        self.agents: dict[str, Agent] = {}
        for agent in agents:
            _add(self.agents, agent)
        self.dispatch = Dispatch(queues, executes_runs=executes_runs, listen_queues=listen_queues)
        self.database_url = resolve_database_url(database_url, data_dir=data_dir)
        self.application_version = application_version or os.environ.get(
            "HELIX_APP_VERSION", worker_process.DEFAULT_APP_VERSION
        )
        # Behind a transaction pooler (`pooler="transaction"`, HELIX_DB_POOLER): see
        # docs/poolers.md; `listen_database_url` is a direct URL for LISTEN and heartbeats.
        self.pooler = pooler_settings(pooler, listen_database_url)
        worker_process.configure_dbos(
            app_name, self.database_url, self.application_version, executor_id, self.pooler
        )
        self.runtime = worker_process.process_runtime(
            self.database_url,
            self.agents,
            llm,
            pool_size=pool_size,
            approval_timeout_seconds=approval_timeout_seconds,
            client_tool_timeout_seconds=client_tool_timeout_seconds,
            database_outage_seconds=database_outage_seconds,
            connection_timeout_seconds=connection_timeout_seconds,
            parking=WaitParking(waiting_runs_in_memory, park_waiting_runs_after_seconds),
            pooler=self.pooler,
        )
        self.reconcile_seconds = reconcile_seconds
        self.worker_lease_seconds = worker_lease_seconds or float(
            os.environ.get("HELIX_WORKER_LEASE_SECONDS", DEFAULT_LEASE_SECONDS)
        )
        self._reads = SessionReads(self.runtime)
        self._starts = RunStarts(self.runtime, self._reads, self.dispatch, pool_size)
        self._control = RunControl(self._reads)
        self._waits = RunWaits(
            self._reads, self._starts, *self.pooler.listen_where(self.database_url)
        )
        self.runtime.notifier = self._waits.notifier
        self._process = worker_process.WorkerProcess(
            self.runtime, self.dispatch, self._starts, self._waits, self.database_url
        )
        # Messages sent while their session's run is live (double texting).
        self._queue = SessionQueue(
            self.runtime,
            self,
            start_run=self._start_queued,
            interrupt_run=self._control.interrupt_run,
            abort_run=self._control.abort_run,
        )
        self._starts.queue = self._queue
        self.runtime.after_run = self._queue.after_run
        install_firer(self.runtime, self._starts, self._queue)  # this process's firings
        self.schedules = Schedules(self.runtime, self._starts)
        self.checkpoints = Checkpoints(self.runtime, self.agents)

    # --- set-up and lifecycle ---------------------------------------------------

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

    @property
    def lease(self) -> WorkerLease | None:
        """This worker's lease, taken by `launch()`."""
        return self._process.lease

    def register(self, agent: Agent) -> None:
        """Add an agent (before `launch()`, so recovered runs find it; after, it is served
        from then on)."""
        model_limits.check_fallbacks([agent])  # before it is added: refused, it is not
        if self.lease is not None:  # after launch: its handoffs' targets are served already
            check_handoffs_registered({**self.agents, agent.name: agent})
        if _add(self.agents, agent) and self.lease is not None:  # registered after launch
            self.dispatch.register_agent(agent.name)
            model_limits.register([agent], listen=self.executes_runs)
            if self.executes_runs:
                self.lease.serve(agent.name)

    def migrate(self) -> None:
        """Create the database if missing and bring helix's and DBOS's tables up to date
        (idempotent, safe from many processes at once). `launch()` calls it first."""
        worker_process.migrate(self.database_url, self.pooler)

    def launch(self) -> None:
        """Migrate, take this worker's lease (refused while another live process holds
        its executor id), launch DBOS, and start heartbeating: the unfinished runs of
        this worker's previous life and of any worker that dies go back to the queues,
        and runs whose start a crash cut short are closed as failed."""
        check_handoffs_registered(self.agents)  # a run never hands off to an unknown agent
        self.migrate()
        self._process.launch(self.worker_lease_seconds, self.reconcile_seconds)

    async def workers(self) -> list[WorkerRow]:
        """Every worker that ever registered on this database, live first."""
        return await asyncio.to_thread(worker_process.list_workers, self.database_url)

    def shutdown(self) -> None:
        """Stop this process's part: helix's connections, DBOS, the worker lease.

        Called on helix's own event loop, the connections close in tasks on that loop,
        which finish only if the loop keeps running; async code should `await
        shutdown_async()`, which closes them before it returns."""
        self._process.shutdown()

    async def shutdown_async(self) -> None:
        """`shutdown()` for async code (a FastAPI lifespan, the end of `asyncio.run`): it
        runs in a worker thread, so helix's connections are closed on their loop before it
        returns, and DBOS's teardown does not block the loop meanwhile."""
        await asyncio.to_thread(self.shutdown)

    # --- starting runs ----------------------------------------------------------

    async def execute(
        self,
        agent: Agent | str,
        input: str | Sequence[str | UserPart] | None = None,
        *,
        session_id: str | None = None,
        state: Any = None,
        terminating: TerminatingConfig | None = None,
        priority: int | None = None,
        resource_id: str | None = None,
        multitask_strategy: MultitaskStrategy | None = None,
        tenant: str | None = None,
        client_tools: Sequence[ClientToolSpec] = (),
        usage_limits: UsageLimits | None = None,
    ) -> RunHandle:
        """Start a run: a new session, or a new turn of an existing one.

        `terminating` runs it in seed 004's autonomous mode: the named tools end the
        run, and the result carries `response` and `generated_messages`. The run
        executes in this process, or is enqueued for a worker (see `Dispatch`);
        `priority` (1 first, up to 2**31-1; unset runs before any) enqueues it on its
        agent's queue. `resource_id` (a user, say) owns the session's long-term
        memories (`helix_dbos.memory`).

        `multitask_strategy` (default: the agent's, `"reject"` unless set) says what
        happens when the session already has a live run: `"reject"` raises
        `AgentAlreadyRunningError`; `"enqueue"`, `"interrupt"`, `"rollback"` and
        `"steer"` store the message and return a handle whose `result()` waits for the
        run it ends up in (docs/double-texting.md).

        `tenant` (a customer, say) gives the run its tenant's share of a limited model's
        calls and of a `RunQueue(partition_by="tenant")` (docs/limits.md); it is
        `helix.runs.tenant` in SQL. `client_tools` are offered to the
        model for this run only, executed by the client (`ClientToolSpec`; with
        `multitask_strategy="reject"`). `usage_limits` caps this run and its descendants'
        model calls, tokens and cost, beside the agent's own (docs/agent-controls.md).

        `input` is a str, or a sequence of str, `BinaryContent`, `ImageUrl` and
        `DocumentUrl` (docs/content-parts.md): the bytes are stored once, by sha256, and
        the transcript keeps a reference."""
        if resource_id is not None:  # memory (issue 36): bound before the run opens
            check_storable(resource_id=resource_id, session_id=session_id)
            session_id = session_id or new_id("ses")
            await self.memory.bind_session(session_id, resource_id)
        opened = await self._starts.execute(
            agent,
            input,
            session_id=session_id,
            state=state,
            terminating=terminating,
            priority=priority,
            multitask_strategy=multitask_strategy,
            tenant=tenant,
            client_tools=tuple(client_tools),
            usage_limits=usage_limits,
        )
        return opened if isinstance(opened, QueuedRunHandle) else self._handle(opened)

    async def _start_queued(self, message: QueuedMessage) -> RunHandle:
        return self._handle(await self._starts.start_queued(message))

    async def resume(self, session_id: str, message: str | None = None) -> RunHandle:
        """Continue an interrupted (or otherwise ended) session in a new run."""
        return self._handle(await self._starts.resume(session_id, message))

    async def retry(self, session_id: str) -> RunHandle:
        """Run a failed session again, with a fresh step budget and its history intact."""
        return self._handle(await self._starts.retry(session_id))

    async def get_handle(self, run_id: str) -> RunHandle:
        """A handle on an existing run, for example after a restart."""
        run = await self._reads.get_run(run_id)
        return RunHandle(self, run.session_id, run.run_id, run.workflow_id)

    def _handle(self, opened: OpenedRun) -> RunHandle:
        return RunHandle(self, opened.session_id, opened.run_id, opened.workflow_id)

    async def reconcile_runs(self) -> list[str]:
        """Close the live runs whose workflow ended without closing them or never
        started; returns their ids. `launch()` runs it every `reconcile_seconds`."""
        return await self._starts.reconcile_runs()

    # --- waiting for results and streams -------------------------------------------

    def stream(
        self,
        session_id: str,
        *,
        after_seq: int = 0,
        run_id: str | None = None,
        follow: bool = True,
        poll_seconds: float = 5.0,
    ) -> AsyncIterator[StreamChunk]:
        """Chunks of a session (or of one run) after `after_seq`, then live ones.

        Live readers sleep on LISTEN/NOTIFY; `poll_seconds` is only the safety net. With
        `follow`, the stream ends after the run's terminal chunk (or, for a whole
        session, once no run is live and every chunk was delivered)."""
        return self._waits.stream(
            session_id, after_seq=after_seq, run_id=run_id, follow=follow, poll_seconds=poll_seconds
        )

    async def wait_for_run_end(
        self, session_id: str, run_id: str, *, poll_seconds: float = 5.0
    ) -> RunInfo:
        """Wait, on LISTEN/NOTIFY, until the run's row reaches a final status."""
        return await self._waits.wait_for_run_end(session_id, run_id, poll_seconds)

    async def wait_for_result(
        self, session_id: str, run_id: str, workflow_id: str, *, poll_seconds: float = 5.0
    ) -> AgentResult:
        """The run's result, usage included: a workflow running in this process is
        awaited directly, any other run's result is read from its row once it ends."""
        return await self._waits.wait_for_result(session_id, run_id, workflow_id, poll_seconds)

    # --- sync twins (see the class docstring) ---------------------------------------

    workers_sync = sync_twin(workers)
    execute_sync = sync_twin(execute)
    resume_sync = sync_twin(resume)
    retry_sync = sync_twin(retry)
    get_handle_sync = sync_twin(get_handle)
    reconcile_runs_sync = sync_twin(reconcile_runs)
    wait_for_run_end_sync = sync_twin(wait_for_run_end)
    wait_for_result_sync = sync_twin(wait_for_result)


def _a2a_transport() -> Any:
    """The A2A transport for remote children, imported on first use (`a2a-sdk` is the
    optional extra `a2a`); the runtime below cannot import it, so the facade hands it in."""
    from helix_dbos.a2a_wire import remote  # noqa: PLC0415 - optional extra, on first use

    return remote


def _add(agents: dict[str, Agent], agent: Agent) -> bool:
    """Add `agent` by name; False if it is there already, an error if another is."""
    existing = agents.get(agent.name)
    if existing is not None and existing is not agent:
        raise ValueError(f"Another agent named '{agent.name}' is already registered")
    agents[agent.name] = agent
    return existing is None


__all__ = ["HelixDBOS"]
