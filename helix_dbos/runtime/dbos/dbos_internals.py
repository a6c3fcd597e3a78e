"""The module that reads DBOS's private state.

DBOS 3.4 has no public API for these few facts; each function says what it
needs and why. Ruff's banned-API rule (TID251) forbids `dbos._*` imports
everywhere else but in `step_bookkeeping.py` beside it (DBOS's per-step check and
record, one statement each), so an upgrade of DBOS has two files to check.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import dbos._dbos as _dbos_module
import sqlalchemy as sa
from dbos import AsyncSQLAlchemyDatasource, SendMessage, WorkflowSerializationFormat
from dbos._context import get_local_dbos_context
from dbos._core import WorkflowHandleAsyncTask, execute_dequeued_workflow
from dbos._datasource_postgres import PostgresAsyncDatasource
from dbos._error import (  # raised by DBOS.send to a workflow that does not exist (yet)
    DBOSNonExistentWorkflowError as DBOSNonExistentWorkflowError,
)
from dbos._error import DBOSWorkflowConflictIDError
from dbos._queue import QueueRateLimit as QueueRateLimit  # a TypedDict DBOS does not export
from dbos._serialization import DBOSDefaultSerializer, serialize_value
from dbos._sys_db import RecordedResult, WorkflowStatusInternal
from dbos._sys_db_postgres import PostgresSystemDatabase
from dbos._tracer import dbos_tracer
from dbos._utils import GlobalParams, generate_uuid
from sqlalchemy.ext.asyncio import AsyncEngine

from helix_dbos.runtime.dbos.step_bookkeeping import (
    check_in_one_statement,
    install_one_statement_records,
)

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
    """`wake_message_waiters()`, for a callback that wants nothing back."""
    wake_message_waiters()


def wake_message_waiters() -> int:
    """Every `recv` (and `get_event`) waiting in this process looks for its message in
    the database once, in one query per thousand waiters (blocking: call it in a
    thread); returns how many it woke. DBOS wakes a waiting recv on its notification,
    and otherwise each waiter re-checks on its own timer, a query each. Helix calls this
    when its own listener connects again after losing its connection (a message sent
    while DBOS's listener was cut off would wait for that timer), and once a minute for
    every waiter at once (`message_recheck.MessageRecheck`), in place of those timers."""
    instance = _dbos_module._dbos_global_instance
    if instance is None or not instance._launched:
        return 0
    sys_db = instance._sys_db
    woken = 0
    maps = (
        (sys_db.notifications_map, sys_db.tables.notifications, "destination_uuid", "topic"),
        (sys_db.workflow_events_map, sys_db.tables.workflow_events, "workflow_uuid", "key"),
    )
    for waiters_map, table, id_column, name_column in maps:
        # Each waiter's own events, taken now: one registered later is never woken by a
        # message this check saw (it may be consumed by then).
        waiting: dict[tuple[str, str], list[Any]] = {}
        for _payload, components, signal in waiters_map.snapshot():
            with signal._lock:
                events = list(signal._waiters)
            waiting.setdefault((components[0], components[1]), []).extend(events)
        for key in _present(sys_db, table, id_column, name_column, waiting.keys()):
            for event in waiting[key]:
                event.set()
                woken += 1
    return woken


_RECHECK_BATCH = 1000  # workflow ids per query of `_present`


def _present(
    sys_db: Any, table: sa.Table, id_column: str, name_column: str, keys: Iterable[tuple[str, str]]
) -> set[tuple[str, str]]:
    """Which of these (workflow id, topic or key) pairs have a row in `table` (for
    messages: an unconsumed one), in one polling read per thousand workflows."""
    wanted = set(keys)
    ids = sorted({workflow_id for workflow_id, _ in wanted})
    found: set[tuple[str, str]] = set()
    for start in range(0, len(ids), _RECHECK_BATCH):
        query = sa.select(table.c[id_column], table.c[name_column]).where(
            table.c[id_column].in_(ids[start : start + _RECHECK_BATCH])
        )
        if table is sys_db.tables.notifications:
            query = query.where(table.c.consumed == False)  # noqa: E712 - SQL
        with sys_db.poll_limiter, sys_db.engine.begin() as conn:
            found |= {(str(a), str(b)) for a, b in conn.execute(query).fetchall()}
    return found & wanted


def waiter_recheck_seconds() -> float:
    """How often DBOS has each waiting `recv`/`get_event` re-check the database on its
    own while its notification listener runs (60 s in DBOS 3.4)."""
    instance = _dbos_module._dbos_global_instance
    if instance is None:
        raise RuntimeError("DBOS is not configured")
    return float(type(instance._sys_db)._notification_fallback_polling_interval)


def set_waiter_recheck_seconds(seconds: float | None) -> None:
    """Set that interval for this process's waiters (`None`: DBOS's own again). Waits
    that start afterwards use it; the listener-less polling interval is untouched."""
    instance = _dbos_module._dbos_global_instance
    if instance is None:
        return
    sys_db = instance._sys_db
    if seconds is None:
        vars(sys_db).pop("_notification_fallback_polling_interval", None)
    else:
        sys_db._notification_fallback_polling_interval = seconds


def listener_running() -> bool:
    """DBOS's LISTEN/NOTIFY listener runs: a waiter is woken by its notification."""
    instance = _dbos_module._dbos_global_instance
    return instance is not None and bool(getattr(instance._sys_db, "_listener_running", False))


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


def _unsharded_postgres(sys_db: Any) -> bool:
    """DBOS's PostgreSQL system database without shard keys: a workflow's rows are keyed
    by its id alone, as helix's own statements on DBOS's tables address them."""
    return type(sys_db) is PostgresSystemDatabase and not sys_db.sharded


def checkpoints_workflow() -> str | None:
    """The workflow whose DBOS datasource checkpoints helix's final write deletes: this
    execution's, on an unsharded system database (a sharded one prefixes the id). DBOS
    would delete them once the workflow returns, in a transaction of its own and an
    ownership read; every step before the final write is recorded by then, so its
    checkpoints serve no replay. Then call `checkpoints_dropped` in workflow code."""
    ctx = get_local_dbos_context()
    if ctx is None or not ctx.is_within_workflow():
        return None
    if not _unsharded_postgres(_dbos_module._get_dbos_instance()._sys_db):
        return None
    return ctx.workflow_id


def checkpoints_dropped(datasource: AsyncSQLAlchemyDatasource) -> None:
    """Helix's owner-guarded final write has deleted this workflow's checkpoints: DBOS
    need not when it returns, unless `datasource` runs another transaction in it (which
    lists the datasource again). Workflow code only: a step's context is a copy."""
    ctx = get_local_dbos_context()
    if ctx is not None and ctx.is_workflow() and datasource in ctx.used_datasources:
        ctx.used_datasources.remove(datasource)


def sends_in_transaction() -> bool:
    """A transaction on helix's engine can carry a DBOS message (see `send_in_transaction`)
    when it runs outside any workflow or step (inside one, `DBOS.send` records itself as
    a step, which the plain transaction would not)."""
    ctx = get_local_dbos_context()
    return ctx is None or not (ctx.is_workflow() or ctx.is_step())


def system_database_is(url: sa.URL) -> bool:
    """Whether DBOS's system database is the database `url` names (same server, same
    database), so helix's transactions can write DBOS's tables."""
    instance = _dbos_module._dbos_global_instance
    if instance is None or instance._sys_db_field is None:
        return False
    sys_url = instance._sys_db.engine.url

    def where(u: sa.URL) -> tuple[Any, ...]:
        return (u.host, u.port, u.database, u.query.get("host"), u.query.get("port"))

    return where(sys_url) == where(url)


def notifications_table() -> str | None:
    """DBOS's message table, schema-qualified, for a statement of helix's own that
    inserts a message as `send_in_transaction` would (None: no schema, e.g. SQLite)."""
    sys_db = _dbos_module._get_dbos_instance()._sys_db
    schema = sys_db.schema
    if schema is None or type(sys_db) is not PostgresSystemDatabase:  # sharded: no
        return None
    return '"' + schema.replace('"', '""') + '".notifications'


def serialized_message(message: Any) -> tuple[str | None, str]:
    """A message as `DBOS.send` stores it: its text and the serialization's name."""
    sys_db = _dbos_module._get_dbos_instance()._sys_db
    return serialize_value(message, WorkflowSerializationFormat.DEFAULT, sys_db.serializer)


def send_in_transaction(
    conn: sa.Connection, destination_id: str, message: Any, topic: str, idempotency_key: str
) -> None:
    """`DBOS.send` in the caller's transaction, which must be on DBOS's system database:
    the message lands with the caller's commit, atomically with the caller's writes.
    What `DBOSClient.send_in_transaction` does, through the running DBOS's system
    database (a client would open a pool of its own)."""
    _dbos_module._get_dbos_instance()._sys_db.send_bulk_with_connection(
        [SendMessage(destination_id, message, topic, idempotency_key)],
        conn,
        serialization_type=WorkflowSerializationFormat.DEFAULT,
        function_name="DBOS.send",
        send_to_forks=False,
    )


# --- parked waits (`wait_parking.py`) ---------------------------------------------------


def is_workflow_task(task: asyncio.Task[Any]) -> bool:
    """`task` is a workflow's own task (DBOS holds each in `_workflow_tasks`), not a task
    a workflow started: cancelling it ends that workflow's execution and nothing else."""
    instance = _dbos_module._dbos_global_instance
    return instance is not None and task in instance._workflow_tasks


def watch_messages(workflow_id: str, topic: str, signal: Any) -> bool:
    """Register `signal` (anything with `set()`) where DBOS's listener, DBOS's pollers and
    helix's re-check signal the waiters of `topic`'s messages to `workflow_id`. Returns
    False if a waiter already there has been signalled (its message is on its way)."""
    sys_db = _dbos_module._get_dbos_instance()._sys_db
    payload, components = sys_db._waiter(workflow_id, topic)
    sys_db.notifications_map.add(payload, signal, components)
    key_signal = sys_db.notifications_map.get(payload)
    if key_signal is None:
        return True
    with key_signal._lock:
        others = [e for e in key_signal._waiters if e is not signal]
    return not any(e.is_set() for e in others)


def unwatch_messages(workflow_id: str, topic: str, signal: Any) -> None:
    sys_db = _dbos_module._get_dbos_instance()._sys_db
    payload, _ = sys_db._waiter(workflow_id, topic)
    if sys_db.notifications_map.get(payload) is not None:
        sys_db.notifications_map.pop(payload, signal)


def messages_waiting(keys: list[tuple[str, str]]) -> set[tuple[str, str]]:
    """Which of these (workflow id, topic) pairs have an unconsumed message, in one
    query per thousand workflows (blocking: call it in a thread)."""
    sys_db = _dbos_module._get_dbos_instance()._sys_db
    return _present(sys_db, sys_db.tables.notifications, "destination_uuid", "topic", keys)


def new_owner_token() -> str:
    return generate_uuid()


def execute_again(workflow_id: str, owner_xid: str, new_owner: str) -> bool:
    """Run a PENDING workflow of this executor again, here, from its start (its recorded
    steps replay), if the execution holding `owner_xid` still owns it, which must have
    ended: what DBOS's queue does with a workflow it claims, with a claim that takes the
    row over from that execution rather than from the queue (blocking: call it in a
    thread). False: the workflow ended, or another execution owns it by now. A retry
    after a failure passes the same `new_owner`: a claim that committed is taken again.

    The claim's statement also returns the workflow's status and recorded steps, so
    that neither the dispatch nor the replay asks the database for them
    (`_ReplayedSteps`)."""
    dbos = _dbos_module._get_dbos_instance()
    sys_db = dbos._sys_db
    with sys_db.engine.begin() as conn:
        rows = conn.execute(
            _claim_statement(sys_db, workflow_id),
            {
                "claimed_id": workflow_id,
                "owners": [owner_xid, new_owner],
                "executor": GlobalParams.executor_id,
                "new_owner": new_owner,
            },
        ).all()
    if not rows:
        return False
    if _unsharded_postgres(sys_db):
        status = claimed_status(rows[0])
        recorded = [row for row in rows if row.function_id is not None]
        _ReplayedSteps.install(sys_db).add(workflow_id, recorded)
    else:
        read = sys_db.get_workflow_status(workflow_id)
        if read is None:
            return False
        status = read
    execute_dequeued_workflow(dbos, status, new_owner)
    return True


# `WorkflowStatusInternal`'s fields (but `inputs` and `shard_key`) and the
# `workflow_status` columns DBOS's `get_workflow_statuses` reads them from.
_STATUS_COLUMNS = {
    "workflow_uuid": "workflow_uuid",
    "status": "status",
    "name": "name",
    "recovery_attempts": "recovery_attempts",
    "config_name": "config_name",
    "class_name": "class_name",
    "authenticated_user": "authenticated_user",
    "authenticated_roles": "authenticated_roles",
    "assumed_role": "assumed_role",
    "queue_name": "queue_name",
    "executor_id": "executor_id",
    "created_at": "created_at",
    "updated_at": "updated_at",
    "app_version": "application_version",
    "app_id": "application_id",
    "workflow_deadline_epoch_ms": "workflow_deadline_epoch_ms",
    "workflow_timeout_ms": "workflow_timeout_ms",
    "deduplication_id": "deduplication_id",
    "priority": "priority",
    "queue_partition_key": "queue_partition_key",
    "forked_from": "forked_from",
    "parent_workflow_id": "parent_workflow_id",
    "started_at_epoch_ms": "started_at_epoch_ms",
    "serialization": "serialization",
    "delay_until_epoch_ms": "delay_until_epoch_ms",
    "attributes": "attributes",
    "schedule_name": "schedule_name",
    "debounce_deadline_epoch_ms": "debounce_deadline_epoch_ms",
    "is_debounced": "is_debounced",
    "application_name": "application_name",
}


def claimed_status(row: Any) -> WorkflowStatusInternal:
    """The claimed workflow's status, as `sys_db.get_workflow_status` would read it
    after the claim (an unsharded database: no shard key)."""
    m = row._mapping
    status: dict[str, Any] = {key: m["wf_" + key] for key in _STATUS_COLUMNS}
    status["is_debounced"] = bool(status["is_debounced"])
    status["inputs"] = m["wf_inputs"]
    status["shard_key"] = None
    return status  # type: ignore[return-value]


def _claim_statement(sys_db: Any, workflow_id: str) -> sa.Select[Any]:
    """One statement: the claim, the claimed workflow's status, and its recorded steps
    (one row a step, the status on each; one row with no step when it has none; no
    row when nothing was claimed). Built once per database (SQLAlchemy's construction
    costs more than its execution) unless sharded."""
    cached: sa.Select[Any] | None = getattr(sys_db, "_helix_claim_statement", None)
    if cached is not None:
        return cached
    ws, oo = sys_db.tables.workflow_status, sys_db.tables.operation_outputs
    wi = sys_db.tables.workflow_input
    # A sharded database's predicates name the workflow's shard key: built for each.
    claimed_id: Any = workflow_id if sys_db.sharded else sa.bindparam("claimed_id")
    claimed = (
        ws.update()
        .where(*sys_db._wf(ws, claimed_id))
        .where(ws.c.status == "PENDING")
        .where(ws.c.owner_xid.in_(sa.bindparam("owners", expanding=True)))
        .where(ws.c.executor_id == sa.bindparam("executor"))
        .values(owner_xid=sa.bindparam("new_owner"), updated_at=sys_db._now_ms_sql())
        .returning(*(ws.c[column] for column in _STATUS_COLUMNS.values()), ws.c.inputs)
        .cte("claimed")
    )
    statement = sa.select(
        *(claimed.c[column].label("wf_" + key) for key, column in _STATUS_COLUMNS.items()),
        sa.func.coalesce(wi.c.inputs, claimed.c.inputs).label("wf_inputs"),
        oo.c.function_id,
        oo.c.function_name,
        oo.c.output,
        oo.c.error,
        oo.c.serialization,
        oo.c.child_workflow_id,
    ).select_from(
        claimed.outerjoin(wi, wi.c.workflow_uuid == claimed.c.workflow_uuid).outerjoin(
            oo, oo.c.workflow_uuid == claimed.c.workflow_uuid
        )
    )
    if not sys_db.sharded:
        sys_db._helix_claim_statement = statement
    return statement


class _NotRecorded:
    """A step the claim found no record of."""


NOT_RECORDED = _NotRecorded()
Answer = RecordedResult | _NotRecorded


@dataclass(slots=True)
class _Replay:
    """One workflow's recorded steps, as its claim read them."""

    added: float  # time.monotonic()
    steps: dict[int, tuple[str, RecordedResult]]  # not handed out yet, by step id
    recorded: frozenset[int]  # every recorded step id
    answered: set[int] = field(default_factory=set)  # ids already answered "no record"


# Set by helix's agent workflow for itself (a context variable: DBOS's step calls run
# in threads with a copy of the workflow's context): its steps' check and record are one
# statement each (`step_bookkeeping.py`). A workflow started from its code (a hook's)
# copies the context and takes the same path, with the same answers; other DBOS
# workflows of the process, an application's own and the benchmarks' bare ones, keep
# DBOS's own code.
_checks_in_autocommit: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "helix_checks_in_autocommit", default=False
)


def checks_in_autocommit() -> None:
    """In a helix agent workflow's code, first: DBOS checks and records its steps in one
    statement each (`step_bookkeeping.py`). Changes no step: nothing is recorded."""
    _checks_in_autocommit.set(True)


def install_step_checks() -> None:
    """From launch on, DBOS's check and record of each step of a helix workflow are one
    autocommit statement each (`step_bookkeeping.py`), and replayed steps are answered
    from memory (`_ReplayedSteps`)."""
    instance = _dbos_module._dbos_global_instance
    if instance is not None and _unsharded_postgres(instance._sys_db):
        _ReplayedSteps.install(instance._sys_db)
        install_one_statement_records(instance._sys_db, _checks_in_autocommit)


class _ReplayedSteps:
    """The recorded steps of workflows helix has just brought back, answered from memory.

    A replayed step asks DBOS's `check_operation_execution` for its record: one
    transaction of two queries a step, for a record that cannot change (a step's output
    is written once, and a PENDING workflow is neither rewound nor forked in place).
    `execute_again` reads them all with its claim; each is handed out once, to the
    step of the same id and name; a step with no record but records after it (the
    `recv` the run waited in, before its timer's) has none, once. The first step past
    them all (or any other name, which DBOS then reports as a changed workflow, or a
    second ask) drops the workflow's entry and goes to the database, which also checks
    for a cancellation, as every new step does."""

    _TTL = 300.0  # seconds: an execution that ended before its replay did (cancelled, say)

    def __init__(self) -> None:
        self._workflows: dict[str, _Replay] = {}
        self._lock = threading.Lock()  # DBOS checks a workflow's parallel steps in threads

    @classmethod
    def install(cls, sys_db: Any) -> _ReplayedSteps:
        """The instance wrapped around this system database's check (once per database)."""
        existing = getattr(sys_db, "_helix_replayed_steps", None)
        if isinstance(existing, cls):
            return existing
        replayed = cls()
        check = (
            check_in_one_statement(sys_db, _checks_in_autocommit)
            if _unsharded_postgres(sys_db)
            else sys_db.check_operation_execution
        )

        def check_operation_execution(
            workflow_id: str, function_id: int, function_name: str, **kwargs: Any
        ) -> RecordedResult | None:
            known = replayed.take(workflow_id, function_id, function_name)
            if isinstance(known, _NotRecorded):
                return None
            if known is not None:
                return known
            return check(workflow_id, function_id, function_name, **kwargs)

        sys_db.check_operation_execution = check_operation_execution
        sys_db._helix_replayed_steps = replayed
        return replayed

    def add(self, workflow_id: str, rows: Iterable[Any]) -> None:
        now = time.monotonic()
        steps = {
            int(row.function_id): (
                row.function_name,
                RecordedResult(
                    output=row.output,
                    error=row.error,
                    serialization=row.serialization,
                    child_workflow_id=row.child_workflow_id,
                    child_shard_key=None,
                ),
            )
            for row in rows
        }
        with self._lock:
            for stale in [w for w, r in self._workflows.items() if now - r.added > self._TTL]:
                del self._workflows[stale]
            if steps:
                self._workflows[workflow_id] = _Replay(now, steps, frozenset(steps))

    def take(self, workflow_id: str, function_id: int, function_name: str) -> Answer | None:
        """The step's record, or `NOT_RECORDED`; None: ask the database."""
        with self._lock:
            replay = self._workflows.get(workflow_id)
            if replay is None:
                return None
            step = replay.steps.pop(function_id, None)
            if (
                step is None
                and function_id not in replay.recorded
                and function_id not in replay.answered
                and any(later > function_id for later in replay.steps)
            ):
                # Not recorded, with records after it (a recv, before its timer's): the
                # claim read every record, and only this execution writes them since.
                replay.answered.add(function_id)
                return NOT_RECORDED
            if step is None or step[0] != function_name:
                del self._workflows[workflow_id]  # past the replay: the database decides
                return None
            if not replay.steps:
                del self._workflows[workflow_id]
            return step[1]

    def pending(self, workflow_id: str) -> int:
        """Steps of `workflow_id` still to be handed out (tests)."""
        replay = self._workflows.get(workflow_id)
        return 0 if replay is None else len(replay.steps)


def set_tracing(enabled: bool) -> bool:
    """Turn DBOS's own workflow and step spans on or off (what `enable_otlp` in an
    application's DBOS config decides at launch); returns whether they were on. Tests."""
    was = not dbos_tracer.disable_otlp
    dbos_tracer.disable_otlp = not enabled
    return was
