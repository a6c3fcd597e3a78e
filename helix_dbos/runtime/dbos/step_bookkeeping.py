"""DBOS's bookkeeping of each step of a helix workflow, one statement each (issue 48).

For every step DBOS checks (is the workflow cancelled? is the step recorded?) and then
records it (does this execution still own the workflow? insert the output), each in a
READ COMMITTED transaction of two statements: eight round trips and two commits per step.
Here each is one autocommit statement with the same effect: the check's two SELECTs
joined (each took its own snapshot anyway, and neither locks), and the record's owner
lock and insert in one statement, which is one transaction, so the lock still holds until
the insert commits and a hand-off (cancel, resume, recovery) cannot land between them.
Same answers and errors as DBOS's `_check_operation_execution_txn` and
`_record_operation_result_txn` (DBOS 3.4, `dbos/_sys_db.py`: re-read both before raising
the `<3.5` pin), same retries on a lost connection (`db_retry`). Only for helix's agent
workflows (the context variable `dbos_internals.checks_in_autocommit` sets; a workflow
started from their code copies it), on an unsharded PostgreSQL system database whose
schema is `dbos`, as every statement of this folder assumes; any other workflow of the
process, an application's own, gets DBOS's own code.

Both statements go to psycopg on a connection of DBOS's own pool (`_one_row`), not
through a SQLAlchemy `Connection`, whose Python took 60–85 µs of each (four a step), as
`store/driver.py` does for helix's own statements.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable
from typing import Any

import psycopg
from dbos._context import current_owner_xid
from dbos._debug_trigger import DebugTriggers
from dbos._error import (
    DBOSStepNondeterminismError,
    DBOSUnexpectedStepError,
    DBOSWorkflowCancelledError,
    DBOSWorkflowConflictIDError,
)
from dbos._sys_db import (
    OperationResultInternal,
    RecordedResult,
    WorkflowStatusString,
    db_retry,
)
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from helix_dbos.store.driver import compiled

InHelixWorkflow = contextvars.ContextVar[bool]

# The step's record if any, beside the workflow's status (a row that always exists).
_CHECK = compiled(
    text(
        "SELECT ws.status, oo.function_id, oo.output, oo.error, oo.function_name, "
        "oo.child_workflow_id, oo.serialization FROM dbos.workflow_status ws "
        "LEFT JOIN dbos.operation_outputs oo ON oo.workflow_uuid = ws.workflow_uuid "
        "AND oo.function_id = :function_id WHERE ws.workflow_uuid = :workflow_id"
    )
)

# The owner's lock and the insert in one statement. The insert happens only while the
# execution still owns the workflow; the outer SELECT says who owns it and, when the
# row was there already (a retry of this write, or another execution's), its time.
_RECORD = compiled(
    text(
        "WITH own AS (SELECT owner_xid FROM dbos.workflow_status "
        "WHERE workflow_uuid = :workflow_id FOR NO KEY UPDATE), "
        "ins AS (INSERT INTO dbos.operation_outputs AS o (workflow_uuid, function_id, "
        "function_name, started_at_epoch_ms, completed_at_epoch_ms, output, error, "
        "child_workflow_id, serialization, application_name, retention_timestamp) "
        "SELECT :workflow_id, :function_id, :function_name, :started_at, :completed_at, "
        ":output, :error, :child_workflow_id, :serialization, :application_name, "
        "CAST(EXTRACT(epoch FROM now()) * 1000 AS BIGINT) FROM own WHERE own.owner_xid = :owner_xid "
        "ON CONFLICT (workflow_uuid, function_id) DO UPDATE "
        "SET completed_at_epoch_ms = o.completed_at_epoch_ms RETURNING o.completed_at_epoch_ms) "
        "SELECT (SELECT owner_xid FROM own), (SELECT completed_at_epoch_ms FROM ins)"
    )
)


def _one_row(sys_db: Any, sql: str, parameters: dict[str, Any]) -> tuple[Any, ...] | None:
    """The first row of one autocommit statement, on a connection of DBOS's pool.

    Errors are raised as SQLAlchemy raises them, so `db_retry` and DBOS's checks tell
    them apart the same way; a lost connection is invalidated (its pool opens another)."""
    try:
        pooled = sys_db.engine.raw_connection()
    except psycopg.Error as error:  # no connection to be had: as `engine.connect()` raises
        raise DBAPIError.instance(None, None, error, psycopg.Error) from error
    try:
        driver: psycopg.Connection[Any] = pooled.driver_connection
        try:
            driver.autocommit = True  # one round trip: no BEGIN, no COMMIT
            try:
                with driver.cursor() as cursor:
                    cursor.execute(sql, parameters)
                    return cursor.fetchone()
            finally:
                if not (driver.closed or driver.broken):
                    driver.autocommit = False  # as the pool's other users expect it
        except psycopg.Error as error:
            lost = driver.closed or driver.broken
            if lost:
                pooled.invalidate()
            raise DBAPIError.instance(
                sql, parameters, error, psycopg.Error, connection_invalidated=lost
            ) from error
    finally:
        pooled.close()


def _recorded_step(
    row: Any, workflow_id: str, function_id: int, function_name: str
) -> RecordedResult | None:
    """What DBOS's check answers from its two reads, from the one row of `_CHECK`."""
    assert row is not None, f"Error: Workflow {workflow_id} does not exist"
    workflow_status, recorded_id, output, error, recorded_name, child_id, serialization = row
    if workflow_status == WorkflowStatusString.CANCELLED.value:
        raise DBOSWorkflowCancelledError(f"Workflow {workflow_id} is cancelled. Aborting function.")
    if recorded_id is None:
        return None
    if function_name != recorded_name:
        raise DBOSUnexpectedStepError(
            workflow_id=workflow_id,
            step_id=function_id,
            expected_name=function_name,
            recorded_name=recorded_name,
        )
    return {
        "output": output,
        "error": error,
        "serialization": serialization,
        "child_workflow_id": child_id,
        "child_shard_key": None,  # an unsharded system database has none
    }


def check_in_one_statement(
    sys_db: Any, in_helix_workflow: InHelixWorkflow
) -> Callable[..., RecordedResult | None]:
    """DBOS's `check_operation_execution`, one autocommit statement in helix's workflows."""
    stock = sys_db.check_operation_execution

    @db_retry(sys_db=sys_db)
    def one_statement(
        workflow_id: str, function_id: int, function_name: str, *, owner_key: str | None = None
    ) -> RecordedResult | None:
        with sys_db._own_key(workflow_id, key=owner_key):
            row = _one_row(sys_db, _CHECK, {"workflow_id": workflow_id, "function_id": function_id})
        return _recorded_step(row, workflow_id, function_id, function_name)

    def check_operation_execution(
        workflow_id: str, function_id: int, function_name: str, **kwargs: Any
    ) -> RecordedResult | None:
        check = one_statement if in_helix_workflow.get() else stock
        return check(workflow_id, function_id, function_name, **kwargs)

    return check_operation_execution


def install_one_statement_records(sys_db: Any, in_helix_workflow: InHelixWorkflow) -> None:
    """Replace `sys_db.record_operation_result` (once) by one that records a helix
    workflow's step in one autocommit statement. A record with no ownership token to
    check, or addressed by a shard key, keeps DBOS's own code."""
    stock = sys_db.record_operation_result
    if getattr(stock, "helix_one_statement", False):
        return
    record = _one_statement_record(sys_db)

    def record_operation_result(
        result: OperationResultInternal,
        *,
        completed_at_epoch_ms: int | None = None,
        owner_xid: str | None = None,
        owner_key: str | None = None,
    ) -> None:
        owner = owner_xid if owner_xid is not None else current_owner_xid(result["workflow_uuid"])
        if not in_helix_workflow.get() or owner is None or owner_key is not None:
            stock(
                result,
                completed_at_epoch_ms=completed_at_epoch_ms,
                owner_xid=owner_xid,
                owner_key=owner_key,
            )
            return
        completed_at = (
            completed_at_epoch_ms if completed_at_epoch_ms is not None else int(time.time() * 1000)
        )
        record(result, completed_at, owner)

    record_operation_result.helix_one_statement = True  # type: ignore[attr-defined]
    sys_db.record_operation_result = record_operation_result


def _one_statement_record(sys_db: Any) -> Callable[[OperationResultInternal, int, str], None]:
    """The record itself, wrapped in `db_retry` once (not once per step)."""

    @db_retry(sys_db=sys_db)
    def record(result: OperationResultInternal, completed_at: int, owner: str) -> None:
        assert result["error"] is None or result["output"] is None, (
            "Only one of error or output can be set"
        )
        workflow_id = result["workflow_uuid"]
        values = {
            "workflow_id": workflow_id,
            "function_id": result["function_id"],
            "function_name": result["function_name"],
            "started_at": result["started_at_epoch_ms"],
            "completed_at": completed_at,
            "output": result["output"],
            "error": result["error"],
            "child_workflow_id": result["child_workflow_id"],
            "serialization": result["serialization"],
            "application_name": sys_db.app_name,
            "owner_xid": owner,
        }
        with sys_db._own_key(workflow_id):
            try:
                row = _one_row(sys_db, _RECORD, values)
            except DBAPIError as error:
                if sys_db._is_unique_constraint_violation(error):
                    raise DBOSStepNondeterminismError(workflow_id, result["function_id"]) from error
                raise
        assert row is not None  # the outer SELECT has no FROM: always one row
        current_owner, stored_at = row
        if current_owner != owner:
            raise DBOSWorkflowConflictIDError(workflow_id)
        # The row was there already with another time: not this write's own retry.
        if stored_at is None or int(stored_at) != completed_at:
            raise DBOSStepNondeterminismError(workflow_id, result["function_id"])
        DebugTriggers.debug_trigger_point(DebugTriggers.DEBUG_TRIGGER_STEP_COMMIT)

    return record
