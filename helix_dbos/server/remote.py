"""Answer, interrupt and abort runs from a process that does not run them.

The CLI uses this instead of launching DBOS: it checks the call with SQL (under
the call's row lock, as `HelixDBOS._answer` does), marks it answered, and sends
the documented plain-JSON message (docs/human-in-the-loop.md) through `DBOSClient` with the same idempotency
key the Python API uses, so an answer is applied once whichever way it came.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

import psycopg
from dbos import DBOSClient
from sqlalchemy.ext.asyncio import create_async_engine

from helix_dbos.api.answers import HUMAN_REQUEST_KINDS, Answer, ClientResult, request_kind, verdict
from helix_dbos.errors import (
    InvalidAnswerError,
    RunNotActiveError,
    RunOnOtherVersionError,
    SessionNotFoundError,
    ToolCallAlreadyAnsweredError,
    ToolCallNotFoundError,
)
from helix_dbos.runtime.dbos.dbos_internals import DBOSNonExistentWorkflowError
from helix_dbos.runtime.steps.closing import close_run
from helix_dbos.runtime.steps.step_types import GateKind
from helix_dbos.runtime.waits.answer_send import (
    answer_payload,
    notify_waits_by_client,
    send_answer_by_client,
)
from helix_dbos.runtime.waits.hitl import INTERRUPT_TOPIC
from helix_dbos.store.answer_claim import (
    BELOW_CALLS_SQL,
    LOCK_CALL_SQL,
    OWN_CALL_SQL,
    answer_target,
    pg_style,
)
from helix_dbos.store.database import connect, libpq_url, sqlalchemy_url
from helix_dbos.store.features import run_versions
from helix_dbos.store.repository import ToolCallRow
from helix_dbos.store.storable import check_storable


def _gone(run: Target, session_id: str) -> tuple[type[Exception], ...]:
    """What acting on a run below the session may meet: its workflow not started yet."""
    if run.session_id == session_id:
        return ()
    return (DBOSNonExistentWorkflowError,)


def _refuse_unserved(conn: psycopg.Connection[Any], run_id: str, workflow_id: str) -> None:
    """As `runtime/run_versions.refuse_unserved`: this client's DBOS tables are in the
    database it answers in, so one statement tells."""
    found = run_versions.run_version_sync(conn, workflow_id)
    if found.version is not None and not found.served:
        served = run_versions.served_versions_sync(conn)
        raise RunOnOtherVersionError(run_id, found.version, served)


@dataclass(frozen=True)
class Target:
    session_id: str
    run_id: str
    workflow_id: str
    tool_name: str | None = None


class RemoteControl:
    def __init__(self, database_url: str, answered_by: str | None = None) -> None:
        self.database_url = database_url
        self.answered_by = answered_by  # recorded with each answer (helix.tool_calls)
        self._client: DBOSClient | None = None

    def client(self) -> DBOSClient:
        if self._client is None:
            self._client = DBOSClient(system_database_url=libpq_url(self.database_url))
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.destroy()
            self._client = None

    # --- answers ------------------------------------------------------------------

    def approve(
        self, session_id: str, tool_call_id: str, approved: bool, reason: str | None = None
    ) -> Target:
        return self.answer(session_id, tool_call_id, verdict(approved, reason))

    def submit(
        self, session_id: str, tool_call_id: str, *, result: Any = None, error: str | None = None
    ) -> Target:
        return self.answer(session_id, tool_call_id, ClientResult(result, error))

    def answer(self, session_id: str, tool_call_id: str, answer: Answer) -> Target:
        """`HelixDBOS.answer` without DBOS launched: the same typed answer, checked and
        sent by the same code (`runtime/waits/answer_send.py`); validate, mark answered
        and send, in one transaction (a failed send rolls back)."""
        kind = answer.kind
        payload = answer_payload(session_id, tool_call_id, answer, answered_by=self.answered_by)
        with connect(self.database_url) as conn:
            row = _answer_target(conn, session_id, tool_call_id)
            if row is None:
                self._require_session(conn, session_id)
                raise ToolCallNotFoundError(session_id, tool_call_id)
            run_id, workflow_id, tool_name, row_kind = (
                row.run_id,
                row.workflow_id,
                row.tool_name,
                row.kind,
            )
            status, answered_at = row.status, row.answered_at
            if row_kind != kind:
                raise InvalidAnswerError(
                    f"Tool call '{tool_call_id}' waits for {row_kind.replace('_', ' ')}; "
                    f"answer it with {request_kind(row_kind).cli_command}"
                )
            if status != "pending" or answered_at is not None:
                raise ToolCallAlreadyAnsweredError(
                    tool_call_id, status if status != "pending" else "answered"
                )
            _refuse_unserved(conn, run_id, workflow_id)
            conn.execute(
                "UPDATE helix.tool_calls SET answered_at = now(), answered_by = %s "
                "WHERE run_id = %s AND tool_call_id = %s",
                (self.answered_by, run_id, tool_call_id),
            )
            send_answer_by_client(self.client(), workflow_id, run_id, kind, payload)
        return Target(session_id, run_id, workflow_id, tool_name)

    # --- run control ----------------------------------------------------------------

    def interrupt(self, session_id: str, reason: str | None = None) -> list[Target]:
        """Stop the live runs of the session and of every session below it as
        `HelixDBOS.interrupt` does: at their next step boundary, or at once when one waits
        for a human (durable messages). Returns them, the session's own first."""
        check_storable(reason=reason)
        runs = self.live_tree(session_id)
        with connect(self.database_url) as conn:
            for run in runs:
                _refuse_unserved(conn, run.run_id, run.workflow_id)
        for run in runs:
            with contextlib.suppress(*_gone(run, session_id)):
                self.client().send(
                    run.workflow_id,
                    {"reason": reason},
                    INTERRUPT_TOPIC,
                    idempotency_key=f"{run.run_id}:interrupt",
                )
                self._notify_waits(run, reason)
        return runs

    def abort(self, session_id: str, reason: str | None = None) -> list[Target]:
        """Cancel the workflows (top down), then close the runs, of the session and of
        every session below it, as `HelixDBOS.abort` does. Returns them, own first."""
        check_storable(reason=reason)
        runs = self.live_tree(session_id)
        for run in runs:
            with contextlib.suppress(*_gone(run, session_id)):
                self.client().cancel_workflow(run.workflow_id)
        error = f"Run aborted: {reason}" if reason else "Run aborted"
        kinds = {run.run_id: self._pending_kinds(run) for run in runs}

        async def close() -> None:
            engine = create_async_engine(sqlalchemy_url(self.database_url), pool_size=1)
            try:
                for run in runs:
                    async with engine.begin() as conn:
                        await close_run(conn, run.session_id, run.run_id, error, "aborted")
            finally:
                await engine.dispose()

        asyncio.run(close())
        for run in runs:
            self._notify_waits(run, reason, kinds[run.run_id])
        return runs

    def live_tree(self, session_id: str) -> list[Target]:
        """The live runs of the session and of the sessions below it, top down."""
        with connect(self.database_url) as conn:
            rows = conn.execute(
                "WITH RECURSIVE tree AS (SELECT session_id, 0 AS depth FROM helix.sessions "
                "WHERE session_id = %(sid)s UNION ALL SELECT s.session_id, t.depth + 1 "
                "FROM helix.sessions s JOIN tree t ON s.parent_session_id = t.session_id) "
                "SELECT r.session_id, r.run_id, r.workflow_id FROM tree JOIN helix.runs r "
                "ON r.session_id = tree.session_id "
                "WHERE r.status IN ('running', 'waiting', 'paused') "
                "ORDER BY tree.depth, r.started_at, r.run_id",
                {"sid": session_id},
            ).fetchall()
            if not rows:
                self._require_session(conn, session_id)
                raise RunNotActiveError(
                    f"Session '{session_id}' has no run in progress, nor has any session below it"
                )
        return [Target(*row) for row in rows]

    def _pending_kinds(self, run: Target) -> list[GateKind]:
        with connect(self.database_url) as conn:
            rows = conn.execute(
                "SELECT DISTINCT kind FROM helix.tool_calls WHERE run_id = %s "
                "AND status = 'pending' ORDER BY kind",
                (run.run_id,),
            ).fetchall()
        return [kind for (kind,) in rows if kind in HUMAN_REQUEST_KINDS]

    def _notify_waits(
        self, run: Target, reason: str | None, kinds: list[GateKind] | None = None
    ) -> None:
        """A notice on each topic a waiting run listens on ends its wait at once."""
        kinds = self._pending_kinds(run) if kinds is None else kinds
        notify_waits_by_client(self.client(), run.workflow_id, run.run_id, kinds, reason)

    def live_run(self, session_id: str) -> Target:
        with connect(self.database_url) as conn:
            row = conn.execute(
                "SELECT run_id, workflow_id FROM helix.runs WHERE session_id = %s "
                "AND status IN ('running', 'waiting', 'paused') LIMIT 1",
                (session_id,),
            ).fetchone()
            if row is None:
                self._require_session(conn, session_id)
                raise RunNotActiveError(f"Session '{session_id}' has no run in progress")
        return Target(session_id, row[0], row[1])

    @staticmethod
    def _require_session(conn: Any, session_id: str) -> None:
        if (
            conn.execute(
                "SELECT 1 FROM helix.sessions WHERE session_id = %s", (session_id,)
            ).fetchone()
            is None
        ):
            raise SessionNotFoundError(session_id)


def _answer_target(
    conn: psycopg.Connection[Any], session_id: str, tool_call_id: str
) -> ToolCallRow | None:
    """The call an answer through `session_id` is for, locked: the rule the Python API
    applies (`store/answer_claim.answer_target`), ambiguity refused the same way."""
    params = {"sid": session_id, "tcid": tool_call_id}
    own = conn.execute(pg_style(OWN_CALL_SQL), params).fetchone()
    if own is not None:
        return ToolCallRow(*own)
    below = [ToolCallRow(*r) for r in conn.execute(pg_style(BELOW_CALLS_SQL), params)]
    target = answer_target(session_id, tool_call_id, None, below)
    if target is None:
        return None
    locked = conn.execute(
        pg_style(LOCK_CALL_SQL), {"rid": target.run_id, "tcid": tool_call_id}
    ).fetchone()
    return ToolCallRow(*locked) if locked else None
