"""Starting runs from the API (`execute`, `resume`, `retry`) and closing runs whose
start never finished.

A run is opened (`run_opening`) and its workflow started under the run's start lock,
so no other process takes the run for stale between the two; a live run whose lock is
free and whose workflow never started or already ended is closed (`close_if_stale`).
"""

from __future__ import annotations

import asyncio
import functools
import sys
import time
from collections.abc import Sequence
from typing import Any

from dbos import DBOS, WorkflowStatus
from psycopg_pool import PoolTimeout

from helix_dbos.definitions.agent import Agent, TerminatingConfig
from helix_dbos.definitions.request_tools import ClientToolSpec, check_client_tools
from helix_dbos.errors import (
    AgentAlreadyRunningError,
    AgentNotRegisteredError,
    DatabaseUnavailableError,
    InvalidInputError,
    RunNotActiveError,
)
from helix_dbos.orchestration.double_texting import MultitaskStrategy, check_strategy
from helix_dbos.orchestration.parts import UserPart, split_input
from helix_dbos.orchestration.types import Message
from helix_dbos.orchestration.usage_limits import UsageLimits
from helix_dbos.runtime.dbos import dbos_tables
from helix_dbos.runtime.loop.llm_step import run_terminating
from helix_dbos.runtime.process.event_loop import on_target_loop
from helix_dbos.runtime.process.outage import is_transient_db_error
from helix_dbos.runtime.process.process_runtime import Runtime, logger
from helix_dbos.runtime.sessions.run_opening import (
    AlreadyRunning,
    OpenedRun,
    OpenRunRequest,
    RunKind,
    new_id,
    open_new_session_run,
    open_run,
)
from helix_dbos.runtime.sessions.session_queue import QueuedRunHandle, SessionQueue
from helix_dbos.runtime.sessions.session_reads import SessionReads
from helix_dbos.runtime.starts.dispatch import Dispatch, check_priority
from helix_dbos.runtime.steps.closing import close_run
from helix_dbos.runtime.steps.content_parts import check_user_parts, store_parts
from helix_dbos.runtime.steps.step_types import RunOptions
from helix_dbos.store import repository as repo
from helix_dbos.store.features import queued_messages as queue_sql
from helix_dbos.store.features.queued_messages import QueuedMessage
from helix_dbos.store.storable import check_storable
from helix_dbos.streaming.notifier import CHANNEL

# DBOS's statuses of a workflow that has ended.
DBOS_TERMINAL = frozenset({"SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"})


class RunStarts:
    """Opens and starts the runs of one HelixDBOS; knows which run in this process."""

    def __init__(
        self,
        runtime: Runtime,
        reads: SessionReads,
        dispatch: Dispatch,
        pool_size: int,
    ) -> None:
        self.runtime = runtime
        self.reads = reads
        self.dispatch = dispatch
        self._slots = asyncio.Semaphore(pool_size)  # see _open_and_start_locked
        # Workflows started and running in this process, by id: a caller awaits its task.
        self.local_runs: dict[str, asyncio.Future[Any]] = {}
        # Messages sent while a run is live (double texting); set by HelixDBOS.
        self.queue: SessionQueue | None = None

    def agent(self, agent: Agent | str) -> Agent:
        agents = self.runtime.agents
        name = agent if isinstance(agent, str) else agent.name
        if name not in agents:
            raise AgentNotRegisteredError(name, list(agents))
        return agents[name]

    async def execute(
        self,
        agent: Agent | str,
        input: str | Sequence[str | UserPart] | None,
        *,
        session_id: str | None,
        state: Any,
        terminating: TerminatingConfig | None,
        priority: int | None,
        multitask_strategy: MultitaskStrategy | None = None,
        tenant: str | None = None,
        client_tools: tuple[ClientToolSpec, ...] = (),
        usage_limits: UsageLimits | None = None,
    ) -> OpenedRun | QueuedRunHandle:
        try:
            input, parts = split_input(input)
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from None
        check_storable(input=input, session_id=session_id, tenant=tenant)
        if tenant is not None and not (isinstance(tenant, str) and tenant.strip()):
            raise InvalidInputError("tenant must be a non-empty string")
        check_priority(priority)
        definition = self.agent(agent)
        strategy = check_strategy(multitask_strategy or definition.multitask_strategy)
        check_client_tools(definition, client_tools)
        if client_tools and strategy != "reject":  # a stored message keeps no tools
            raise InvalidInputError("client_tools need multitask_strategy='reject'")
        if self.dispatch.executes_runs:  # the environment may have changed since launch()
            self.runtime.check_agents([definition])
        initial_state = definition.initial_state(state) if state is not None else None
        check_storable(state=initial_state)
        if parts:
            check_user_parts(definition.llm.model, parts)
            if strategy != "reject" and session_id is not None:  # a stored message is text
                raise InvalidInputError(
                    f"multitask_strategy={strategy!r} takes text only: send content parts "
                    "with 'reject'"
                )
        messages = await self._input_messages(input, parts)
        if terminating is not None:
            definition.check_terminating(terminating)
        if usage_limits is not None and not isinstance(usage_limits, UsageLimits):
            raise InvalidInputError("usage_limits must be UsageLimits")
        options = RunOptions(terminating, tenant, client_tools, usage_limits)
        began = time.monotonic()
        try:
            if strategy != "reject" and session_id is not None and self.queue is not None:
                if priority is not None:
                    raise InvalidInputError(
                        f"multitask_strategy={strategy!r} runs the message in its session's "
                        "order: it takes no priority"
                    )
                return await self._double_text(
                    definition, session_id, input, initial_state, strategy, options
                )
            return await self.open_and_start(
                "turn", definition, session_id, messages, initial_state, options, priority
            )
        except Exception as exc:
            if DBOS.workflow_id is not None or not is_transient_db_error(exc):
                raise  # inside a run, the outage code waits it out
            waited = round(time.monotonic() - began, 1)
            cause = str(exc)
            if isinstance(exc, PoolTimeout):  # it says only that it waited
                cause = await self.runtime.statement_pool.why_unavailable()
            raise DatabaseUnavailableError("execute()", waited, cause) from exc

    async def _input_messages(self, text: str | None, parts: list[UserPart]) -> list[Message]:
        """The run's input message; its parts' bytes stored first (content_parts.py)."""
        if not parts:
            return [Message(role="user", content=text)] if text is not None else []
        refs = await on_target_loop(lambda: store_parts(self.runtime, parts))
        return [Message(role="user", content=text, attachments=list(refs))]

    async def _double_text(
        self,
        agent: Agent,
        session_id: str,
        input: str | None,
        state: dict[str, Any] | None,
        strategy: MultitaskStrategy,
        options: RunOptions,
    ) -> OpenedRun | QueuedRunHandle:
        """`execute` with a strategy other than reject: the message is stored if the
        session is busy, else it starts a run at once (and is stored after all if a run
        opened by someone else between the two wins)."""
        assert self.queue is not None
        message_id = new_id("msg")
        messages = [Message(role="user", content=input)] if input is not None else []
        for _ in range(8):
            handle = await self.queue.submit(
                agent.name, session_id, input, state, strategy, message_id, options.to_json()
            )
            if handle is not None:
                return handle
            try:
                return await self.open_and_start(
                    "turn", agent, session_id, messages, state, options
                )
            except AgentAlreadyRunningError:
                continue  # a run started in between: store the message after all
        raise AgentAlreadyRunningError(session_id)

    async def start_queued(self, message: QueuedMessage) -> OpenedRun:
        """Open and start the run a stored message starts (`OpenRunRequest.queued_message`);
        `QueuedMessageTakenError` if someone else took it first, `AgentAlreadyRunningError`
        while the session has a live run (whose end starts it)."""
        agent = self.agent(message.agent_name)
        options = queued_options(message)
        effective = RunOptions(
            run_terminating(agent, options), options.tenant, usage_limits=options.usage_limits
        )
        request = OpenRunRequest.queued_message(agent, message, effective.to_json())
        return await on_target_loop(
            lambda: self._open_and_start_locked(request, agent, options, None)
        )

    async def resume(self, session_id: str, message: str | None) -> OpenedRun:
        check_storable(message=message)
        session = await self.reads.get_session(session_id)
        messages = [Message(role="user", content=message)] if message is not None else []
        agent = self.agent(session.agent_name)
        options = await self._inherited_options(session_id)
        return await self.open_and_start("resume", agent, session_id, messages, None, options)

    async def retry(self, session_id: str) -> OpenedRun:
        session = await self.reads.get_session(session_id)
        if session.status not in ("failed", "aborted", "interrupted"):
            raise RunNotActiveError(
                f"Session '{session_id}' is {session.status}; only a failed, aborted or interrupted run can be retried"
            )
        agent = self.agent(session.agent_name)
        options = await self._inherited_options(session_id)
        return await self.open_and_start("retry", agent, session_id, [], None, options)

    async def _inherited_options(self, session_id: str) -> RunOptions:
        """A resume's or retry's options: the tenant of the session's latest run (a
        child's is its parent's), so a run cannot leave its tenant's share that way."""
        return RunOptions(tenant=await self.reads.read(repo.session_tenant, session_id))

    async def open_and_start(
        self,
        kind: RunKind,
        agent: Agent,
        session_id: str | None,
        messages: list[Message],
        state: dict[str, Any] | None,
        options: RunOptions | None = None,
        priority: int | None = None,
        run_id: str | None = None,
    ) -> OpenedRun:
        options = options or RunOptions()
        terminating = run_terminating(agent, options)
        effective = RunOptions(
            terminating, options.tenant, options.client_tools, options.usage_limits
        )
        request = OpenRunRequest.top_level(
            kind,
            agent,
            session_id=session_id,
            messages=messages,
            state=state,
            options=effective.to_json(),
            run_id=run_id,
        )
        return await on_target_loop(
            lambda: self._open_and_start_locked(request, agent, options, priority)
        )

    async def _open_and_start_locked(
        self, request: OpenRunRequest, agent: Agent, options: RunOptions, priority: int | None
    ) -> OpenedRun:
        """Open the run and start its workflow under the run's start lock (a new
        session's run started here: both at once, see `_open_while_starting`).

        No other process can then take the run for stale between the two (two
        concurrent starts on one session: exactly one wins). A process killed between
        them leaves a live row whose lock is free, which `close_if_stale` closes.

        A start holds its lock connection (from the statement pool) until its workflow
        has started, so at most `pool_size` starts (half that pool) hold a lock at once:
        a burst of starts leaves the runs under way connections for their steps.
        """
        pooled = self.runtime.pooler.pooled
        async with self._slots, self.runtime.statements() as lock:
            # Inside a workflow, even a new session opens in its exactly-once transaction;
            # behind a pooler too (the lock's transaction must not hold the run's rows).
            one_statement = request.creates_session and DBOS.workflow_id is None and not pooled
            if pooled:
                await repo.lock_run_start_in_transaction(lock, request.run_id)
            elif not one_statement:
                await repo.lock_run_start(lock, request.run_id)
            task: asyncio.Future[Any] | None
            try:
                if one_statement and self.dispatch.starts_here(agent, priority):
                    opened, task = await self._open_while_starting(lock, request, agent, options)
                else:
                    if one_statement:  # which takes the lock as well
                        opened = await open_new_session_run(lock, request)
                    else:
                        opened = await self._open(request)
                    task = await self._start(opened, agent, options, priority)
                if task is not None:
                    self.local_runs[opened.workflow_id] = task
                    task.add_done_callback(
                        functools.partial(_forget_local, self.local_runs, opened.workflow_id)
                    )
            finally:
                failed = sys.exc_info()[1] is not None
                try:
                    if pooled:
                        await repo.end_run_start_transaction(lock)
                    else:
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
        self, lock: repo.SQLConnection, request: OpenRunRequest, agent: Agent, options: RunOptions
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
        (`close_if_stale`).
        """
        history = self.runtime.history
        sid, rid = request.session_id, request.run_id
        history.seed_new_run(sid, rid, request.messages, request.new_state)
        write = asyncio.ensure_future(open_new_session_run(lock, request))
        self.runtime.opening(rid, write)
        try:
            await asyncio.sleep(0)  # the open's statement goes out first, then DBOS's start
            opened = OpenedRun(sid, rid, request.workflow_id, 1)
            task = await self._start(opened, agent, options, None)
        except BaseException:
            self.runtime.forget_opening(rid)
            history.take_new_run(sid, rid)
            await asyncio.wait({write})  # done before the lock is released
            raise
        assert task is not None
        try:
            await asyncio.shield(write)
        except BaseException:  # the open failed, or the caller was cancelled
            await asyncio.wait({write})  # done before the lock is released
            raise
        self.runtime.wake_ups.send_soon(CHANNEL, sid)  # its `run_started` committed
        return opened, task

    async def _open(self, request: OpenRunRequest) -> OpenedRun:
        try:
            opened = await self.runtime.transaction("helix.open_run", open_or_refuse, request)
        except AgentAlreadyRunningError as exc:
            if DBOS.workflow_id is not None or exc.run_id is None:
                raise
            if not await self.close_if_stale(exc.run_id):
                raise
            opened = await self.runtime.transaction("helix.open_run", open_or_refuse, request)
        # Its `run_started` chunk has committed: wake the session's readers now (a NOTIFY
        # in the open's transaction would hold every NOTIFY's commit lock through it).
        self.runtime.wake_ups.send_soon(CHANNEL, request.session_id)
        return opened

    async def close_if_stale(self, run_id: str) -> bool:
        """Close a live run whose workflow never started (and nobody is starting it) or
        already ended; returns whether it did. Runs on the target loop."""
        run = await self.reads.get_run(run_id)
        async with self.runtime.engine.begin() as conn:
            if not await repo.run_start_settled(conn, run_id):
                return False  # a process is starting it right now
            status = await DBOS.get_workflow_status_async(run.workflow_id)
            if status is not None and status.status not in DBOS_TERMINAL:
                return False
            message = await queue_sql.started_by(conn, run_id) if status is None else None
            agent = self.runtime.agents.get(run.agent_name)
            if message is not None and agent is not None:
                # A stored message's run, opened by a starter killed before its start:
                # the message must not be lost, so its workflow starts now (its id is
                # the run's own, so a start racing this one is the same workflow).
                opened = OpenedRun(run.session_id, run.run_id, run.workflow_id, run.turn)
                await self._start(opened, agent, queued_options(message), None)
                return False
            ended_as: str = "aborted" if status and status.status == "CANCELLED" else "failed"
            error = stale_reason(status)
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

    async def reconcile_runs(self, *, cancel_grace_seconds: float = 0) -> list[str]:
        """Close every live run whose workflow ended without closing it (cancelled from
        outside, failed in a way the run could not record) or never started (its starter
        was killed between opening and starting it): `failed`, or `aborted` for a
        cancelled workflow, with a readable error. Returns the closed run ids.

        `cancel_grace_seconds`: leave a workflow cancelled less than that ago to its
        canceller (an abort, here or in another process, cancels and then closes the
        run with the reason it was given); the periodic sweep waits `CANCEL_GRACE_SECONDS`."""
        rows = await self.reads.read(
            dbos_tables.live_runs_with_ended_workflow, cancel_grace_seconds=cancel_grace_seconds
        )
        closed: list[str] = []
        for run_id in rows:
            if await on_target_loop(functools.partial(self.close_if_stale, run_id)):
                closed.append(run_id)
        if self.queue is not None:  # stored messages whose next step was cut short
            await self.queue.sweep()
        return closed

    async def reconcile_forever(self, every_seconds: float) -> None:
        while True:
            try:
                await self.reconcile_runs(cancel_grace_seconds=CANCEL_GRACE_SECONDS)
            except Exception as exc:  # a database outage: try again next time
                logger.warning("helix could not reconcile runs: %s", exc)
            await asyncio.sleep(every_seconds)


#: How long the periodic sweep leaves a cancelled workflow's live run to its canceller.
CANCEL_GRACE_SECONDS = 10.0


async def open_or_refuse(conn: repo.SQLConnection, request: OpenRunRequest) -> OpenedRun:
    """The body of `helix.open_run`: `open_run` (its caller wakes the session's readers
    after the commit), refusing a session with a live run."""
    opened = await open_run(conn, request, wake=False)
    if isinstance(opened, AlreadyRunning):
        raise AgentAlreadyRunningError(request.session_id, opened.run_id)
    return opened


def queued_options(message: QueuedMessage) -> RunOptions:
    """The options of the run a stored message starts (as given with the message)."""
    terminating = message.options.get("terminating")
    config = TerminatingConfig.from_dict(terminating) if terminating else None
    limits = message.options.get("usage_limits")
    usage_limits = UsageLimits.from_json(limits) if limits else None
    return RunOptions(config, message.options.get("tenant"), usage_limits=usage_limits)


def stale_reason(status: WorkflowStatus | None) -> str:
    """Why a live run's row is being closed from outside its workflow."""
    if status is None:
        return "Run never started"
    if status.status == "CANCELLED":
        return "Run aborted: its workflow was cancelled"
    if status.error is not None:
        return f"Run failed: its workflow ended as {status.status}: {status.error}"
    return f"Run failed: its workflow ended as {status.status} without recording its end"


def _forget_local(runs: dict[str, asyncio.Future[Any]], workflow_id: str, _: object) -> None:
    """A local run's task ended: drop it. A partial, not a closure, so that a waiting
    run's task holds no cell on its `OpenedRun` (issue 34: memory per waiting run)."""
    runs.pop(workflow_id, None)
