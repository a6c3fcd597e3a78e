"""The process-wide runtime: registered agents, the engine, the datasource.

The agent workflow is one module-level DBOS function, so it finds its
dependencies here; a recovered process that constructs `HelixDBOS` with the
same agents finds them again by name.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar

from dbos import DBOS, AsyncSQLAlchemyDatasource
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from helix_dbos.definitions.agent import Agent
from helix_dbos.errors import AgentNotRegisteredError, HelixShutDownError, LLMConfigurationError
from helix_dbos.llm.base import LLMAdapter, SelfChecking
from helix_dbos.orchestration.transcript import Transcript
from helix_dbos.orchestration.types import Message
from helix_dbos.runtime.dbos import dbos_internals
from helix_dbos.runtime.process.outage import DEFAULT_OUTAGE_SECONDS, OutageWait, ProcessShutDown
from helix_dbos.runtime.process.outage import is_transient_db_error as is_transient_db_error
from helix_dbos.runtime.process.wait_parking import WaitParking
from helix_dbos.runtime.process.wake_ups import WakeUps
from helix_dbos.store import repository as repo
from helix_dbos.store.driver import DriverConnection
from helix_dbos.store.pooler import DIRECT, PoolerSettings
from helix_dbos.store.statement_pool import CHECKOUT_TIMEOUT_SECONDS, StatementPool
from helix_dbos.streaming.notifier import ChunkNotifier

T = TypeVar("T")
P = ParamSpec("P")
logger = logging.getLogger("helix_dbos")


@dataclass(slots=True)
class _Cached:
    """A session's cached transcript: its messages through `last_seq`, read while the
    session had `rollbacks` rolled-back runs."""

    last_seq: int
    transcript: Transcript
    rollbacks: int


class HistoryCache:
    """Per-process cache of session transcripts, topped up with new rows only.

    Each LLM step reads `seq > last_seq` instead of the whole transcript, so a
    step's cost does not grow with the conversation; the rows a step just wrote are
    appended in place (`Transcript`, with the call ids and model messages derived
    from them), so neither does its Python. A fresh process simply reads everything
    once.

    Messages are only ever appended, except by a rollback (double texting), which any
    process of the fleet may run, and not always on the session's newest messages (an
    `interrupt` message's run may come between). So a run's first read also counts the
    session's rolled-back runs, and reads the transcript whole when that count moved
    since the cached one was read.
    """

    def __init__(self, max_sessions: int = 1024, max_messages: int = 100_000) -> None:
        self._entries: OrderedDict[str, _Cached] = OrderedDict()
        self._max = max_sessions
        # Bounded by messages too: a process serving many long sessions would otherwise
        # hold them all (memory, and the collector's time). The least recently used
        # sessions go first; the one just used stays, however long.
        self._max_messages = max_messages
        self._held = 0  # messages in the cached transcripts
        # Runs on a new session that this process opened and runs: their first step's
        # transcript and state are what the open wrote, so it reads nothing.
        self._new_runs: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def seed_new_run(
        self, session_id: str, run_id: str, messages: list[Message], state: dict[str, Any]
    ) -> None:
        """Remember what a new session's first run starts from (its whole transcript)."""
        self._keep(session_id, _Cached(len(messages), Transcript(messages), 0))
        self._new_runs[run_id] = state
        while len(self._new_runs) > self._max:
            self._new_runs.popitem(last=False)

    def take_new_run(
        self, session_id: str, run_id: str
    ) -> tuple[Transcript, dict[str, Any]] | None:
        """A seeded run's first transcript and state, once; None if not seeded here.

        No query, so no look for a pending interrupt either: nobody can address the
        session before `execute()` returns, so one sent right after races this step
        anyway, and the next step boundary (a few milliseconds on) takes it.
        """
        state = self._new_runs.pop(run_id, None)
        entry = self._entries.get(session_id)
        if state is None or entry is None:
            return None
        return entry.transcript, state

    async def read(self, conn: repo.SQLConnection, session_id: str) -> tuple[Transcript, int]:
        """A live run's transcript after a step whose rows the cache did not take. No run
        of the session but this one can be rolled back while it is live."""
        entry = self._pop(session_id)
        last_seq = entry.last_seq if entry else 0
        rows = await repo.load_messages(conn, session_id, after_seq=last_seq)
        kept = self._top_up(session_id, entry, rows, entry.rollbacks if entry else 0)
        return kept.transcript, kept.last_seq + 1

    async def read_first(
        self, conn: repo.SQLConnection, workflow_id: str | None, session_id: str, run_id: str
    ) -> tuple[repo.FirstRead, Transcript]:
        """A run's first read (`repo.first_read`) in one round trip, and the transcript
        topped up; a second, whole read if a run of the session was rolled back since the
        cached transcript was read."""
        entry = self._pop(session_id)
        after = entry.last_seq if entry else 0
        read = await repo.first_read(conn, workflow_id, session_id, run_id, after_seq=after)
        if entry is not None and read.rollbacks != entry.rollbacks:
            entry = None
            read = await repo.first_read(conn, workflow_id, session_id, run_id, after_seq=0)
        kept = self._top_up(session_id, entry, read.messages, read.rollbacks)
        return read, kept.transcript

    def _top_up(
        self,
        session_id: str,
        entry: _Cached | None,
        rows: list[tuple[int, Message]],
        rollbacks: int,
    ) -> _Cached:
        """The cached transcript with the rows read after it, kept as the new entry.

        The entry was popped before the read's await: a transcript read while another
        read of the session was under way is not the one that read appends to."""
        if entry is None:
            entry = _Cached(0, Transcript(), rollbacks)
        if rows:
            entry.transcript.extend(m for _, m in rows)
            entry.last_seq = rows[-1][0]
        entry.rollbacks = rollbacks
        self._keep(session_id, entry)
        return entry

    def _pop(self, session_id: str) -> _Cached | None:
        entry = self._entries.pop(session_id, None)
        if entry is not None:
            self._held -= len(entry.transcript)
        return entry

    def _keep(self, session_id: str, entry: _Cached) -> None:
        self._pop(session_id)
        self._entries[session_id] = entry
        self._held += len(entry.transcript)
        self._bound()

    def _bound(self) -> None:
        """Drop the least recently used transcripts beyond the bounds (never the last)."""
        while len(self._entries) > 1 and (
            len(self._entries) > self._max or self._held > self._max_messages
        ):
            _, dropped = self._entries.popitem(last=False)
            self._held -= len(dropped.transcript)

    def take(
        self, session_id: str, written: tuple[int, list[Message]]
    ) -> tuple[Transcript, int] | None:
        """The transcript without a query, if `written` (first seq, messages this process
        just appended) directly follows what the cache holds; else None."""
        entry = self._entries.get(session_id)
        if entry is None or written[0] != entry.last_seq + 1:
            return None
        entry.last_seq += len(written[1])
        entry.transcript.extend(written[1])
        self._held += len(written[1])
        self._entries.move_to_end(session_id)
        self._bound()
        return entry.transcript, entry.last_seq + 1

    def forget(self, session_id: str) -> None:
        """Drop a session's transcript (rows written elsewhere; a parked run's, which may
        wait for days): its next read reads it whole, as a fresh process does."""
        self._pop(session_id)


class Runtime:
    def __init__(
        self,
        *,
        agents: dict[str, Agent],
        engine: AsyncEngine,
        statement_pool: StatementPool,
        datasource: AsyncSQLAlchemyDatasource,
        llm: LLMAdapter | None,
        adapter_factory: Callable[[Agent], LLMAdapter],
        parking: WaitParking,
        approval_timeout_seconds: float = 7 * 24 * 3600,
        client_tool_timeout_seconds: float = 600,
        database_outage_seconds: float = DEFAULT_OUTAGE_SECONDS,
        connection_timeout_seconds: float = CHECKOUT_TIMEOUT_SECONDS,
        pooler: PoolerSettings = DIRECT,
    ) -> None:
        self.agents = agents
        self.pooler = pooler  # behind a transaction pooler: no session-level locks
        self.engine = engine  # transactions: DBOS's datasource, and a few of helix's own
        self.statement_pool = statement_pool  # every other statement (`statements()`)
        # NOTIFYs sent after the writes they announce, not inside them (`wake_ups.py`).
        self.wake_ups = WakeUps(statement_pool)
        self.datasource = datasource
        self.llm_override = llm
        self._adapter_factory = adapter_factory
        self.history = HistoryCache()
        # Opens of new sessions' runs still being written while their workflows start
        # (`HelixDBOS._open_while_starting`), by run id: each workflow waits for its own.
        self._opening: dict[str, asyncio.Future[Any]] = {}
        # The process's LISTEN connection (set by HelixDBOS): a slow tool step sleeps on
        # it to learn that its run was aborted, from this process or another.
        self.notifier: Callable[[], Awaitable[ChunkNotifier]] | None = None
        self.approval_timeout_seconds = approval_timeout_seconds
        self.client_tool_timeout_seconds = client_tool_timeout_seconds
        # Inside a run, a database that went away is waited for, up to this horizon.
        self.outage = OutageWait(database_outage_seconds, connection_timeout_seconds)
        # Set by the worker lease, awaited before each step: waits while this worker cannot
        # reach the database, and stops a workflow this execution no longer owns.
        self.lease_check: Callable[[], Awaitable[None]] = no_lease
        # The application version this process executes runs of, while it holds its
        # worker lease (None: it executes none): its own runs are served, whatever the
        # workers table says (`runtime/waits/run_versions.py`).
        self.serves_version: str | None = None
        # Set by HelixDBOS: awaited by a run's workflow once the run has ended, to start
        # its session's next stored message (double texting, `runtime/sessions/session_queue.py`).
        self.after_run: Callable[[str], Awaitable[None]] | None = None
        # Runs under way here with client tools of their own, by workflow id (see `agent`).
        self.run_agents: dict[str, Agent] = {}
        # Waits for a human: the recent ones in memory, the long ones parked.
        self.parking = parking

    def agent(self, name: str) -> Agent:
        # A run with client tools of its own works with its agent extended by them
        # (`definitions/request_tools.py`): its steps find it by their workflow id.
        own = self.run_agents.get(DBOS.workflow_id or "") if self.run_agents else None
        if own is not None and own.name == name:
            return own
        try:
            return self.agents[name]
        except KeyError:
            raise AgentNotRegisteredError(name, list(self.agents)) from None

    def adapter_for(self, agent: Agent) -> LLMAdapter:
        """`HelixDBOS(llm=...)` serves the `mock` model; `provider:model` goes to its provider."""
        if agent.llm.provider == "mock":
            if self.llm_override is None:
                raise ValueError(
                    f"Agent '{agent.name}' uses model 'mock': pass HelixDBOS(llm=MockLLM(...)) "
                    "or give it a real model such as 'anthropic:claude-sonnet-4-6'"
                )
            return self.llm_override
        return self._adapter_factory(agent)

    def configuration_problem(self, agent: Agent) -> str | None:
        """Why `agent`'s LLM calls would fail as configured, or None: checked before any
        run starts, so the fix is named up front (an unknown provider prefix lists the
        valid ones; a missing key names its variable)."""
        try:
            adapter = self.adapter_for(agent)
        except ValueError as exc:
            said = str(exc)
            return (
                said
                if said.startswith(f"Agent '{agent.name}'")
                else f"Agent '{agent.name}': {said}"
            )
        problem = adapter.configuration_problem() if isinstance(adapter, SelfChecking) else None
        if problem:
            return f"Agent '{agent.name}' (model '{agent.llm.model}'): {problem}"
        for model in agent.llm.fallback:  # LLMConfig(fallback=...): callable too, up front
            fallback = self.configuration_problem(agent.on_model(model))
            if fallback:
                return f"{fallback} (a fallback model)"
        return None

    def check_agents(self, agents: list[Agent]) -> None:
        """Raise LLMConfigurationError naming every agent whose model cannot be called."""
        problems = [p for p in map(self.configuration_problem, agents) if p]
        if problems:
            raise LLMConfigurationError("; ".join(problems))

    async def transaction(
        self,
        name: str,
        func: Callable[Concatenate[repo.SQLConnection, P], Coroutine[Any, Any, T]],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """An exactly-once datasource transaction inside a workflow, a plain one outside.

        `func` receives the open session as its first argument.
        """
        datasource = self.datasource

        async def body(*inner: P.args, **inner_kw: P.kwargs) -> T:
            return await func(datasource.sql_session(), *inner, **inner_kw)

        body.__qualname__ = name

        async def attempt(_: float) -> T:
            # Each attempt is its own checkpointed step, so a replay retries the same way.
            # (DBOS's datasource itself waits out a lost connection, without a horizon.)
            return await datasource.run_tx_step_async(
                {"name": name, "isolation_level": "READ COMMITTED"}, body, *args, **kwargs
            )

        return await self.outage.run(name, attempt)

    def opening(self, run_id: str, write: asyncio.Future[Any]) -> None:
        """`write` opens the run (its rows): its workflow waits for it before its first
        step. The starter forgets it if the workflow never started."""
        self._opening[run_id] = write

    def forget_opening(self, run_id: str) -> None:
        self._opening.pop(run_id, None)

    async def wait_opened(self, run_id: str, session_id: str) -> None:
        """Wait for this process's open of the run, if one is under way.

        If it failed, or its outcome is unknown (a lost connection, a cancelled
        caller), the transcript seeded for the run is dropped: the first step then
        reads the run from the database, and runs it if the open committed after all,
        or ends it as never opened (`RunNotOpened`) if not.
        """
        write = self._opening.pop(run_id, None)
        if write is None:
            return  # opened before the workflow started, or by another process
        await asyncio.wait({write})  # a cancelled workflow does not cancel the open
        if write.cancelled() or write.exception() is not None:
            self.history.take_new_run(session_id, run_id)

    @asynccontextmanager
    async def statements(
        self, checkout_seconds: float | None = None
    ) -> AsyncIterator[DriverConnection]:
        """A pooled connection on which each statement commits by itself, sent straight
        to psycopg (`store.driver`): for reads, and for writes that are keyed or guarded
        on their own and need no transaction around them. `checkout_seconds`: the wait
        for a free connection (the pool's own by default)."""
        with shut_down_stops_execution():
            async with self.statement_pool.connection(checkout_seconds) as conn:
                with owner_lost_stops_execution():
                    yield conn

    async def on_connection(
        self,
        what: str,
        body: Callable[[DriverConnection], Coroutine[Any, Any, T]],
        *,
        wait: bool = True,
    ) -> T:
        """`body` on a pooled connection (`statements()`); inside a run (and `wait`), run
        again on a fresh connection after a lost one, until the database answers
        (`OutageWait`): for keyed or guarded writes, and reads."""

        async def once(checkout_seconds: float | None = None) -> T:
            async with self.statements(checkout_seconds) as conn:
                return await body(conn)

        return await self.outage.run(what, once) if wait else await once()

    async def read(
        self,
        func: Callable[Concatenate[repo.SQLConnection, P], Coroutine[Any, Any, T]],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """A read-only query on a pooled connection, in autocommit: one statement needs
        no transaction, and a BEGIN and a ROLLBACK around it would triple its round
        trips (each read here is one statement, so it sees one snapshot). Inside a run,
        a database outage is waited out."""

        async def body(conn: DriverConnection) -> T:
            return await func(conn, *args, **kwargs)

        return await self.on_connection(getattr(func, "__name__", "a read"), body)


@contextmanager
def owner_lost_stops_execution() -> Iterator[None]:
    """A write refused because another execution owns the run's workflow now (this
    worker's lease was claimed) becomes DBOS's "no longer owned": DBOS parks this
    execution instead of failing the run."""
    try:
        yield
    except DBAPIError as exc:
        if getattr(exc.orig, "sqlstate", None) != repo.OWNER_LOST:
            raise
        owner = dbos_internals.execution_owner()
        raise dbos_internals.WorkflowNotOwnedError(owner[0] if owner else "") from exc


@contextmanager
def shut_down_stops_execution() -> Iterator[None]:
    """A statement refused because helix was shut down in this process stops workflow
    code where it is, unrecorded (`ProcessShutDown`); other callers get the error."""
    try:
        yield
    except HelixShutDownError as exc:
        if DBOS.workflow_id is None:
            raise
        raise ProcessShutDown(f"{exc} (workflow {DBOS.workflow_id} stays pending)") from exc


async def no_lease() -> None:
    """A runtime without a worker lease (not launched through HelixDBOS) never fences."""


_current: Runtime | None = None


def set_runtime(runtime: Runtime | None) -> None:
    global _current
    _current = runtime


def current_runtime() -> Runtime:
    if _current is None:
        raise RuntimeError(
            "No HelixDBOS runtime in this process: construct HelixDBOS(agents=[...]) before launch "
            "so recovered agent runs can find their definitions"
        )
    return _current
