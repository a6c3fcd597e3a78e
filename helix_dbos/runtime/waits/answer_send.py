"""Send an answer in the transaction that claims it.

`approve()` and the other answers claim the pending call (`store/answer_claim.py`) and
send the answer with `DBOS.send` before the claim commits. `DBOS.send` is a transaction
of its own on DBOS's pool, reached through a thread: a thread hop and three round trips
on the path from `approve()` to the tool, and then the claim's commit. When DBOS's
system tables live in helix's database (helix configured DBOS from the same URL, the
usual case), the message row is inserted in the claiming transaction instead, as
`DBOSClient.send_in_transaction` does: the claim and the answer commit together (a
SIGKILL before the commit leaves neither), and the commit is what wakes the run.
Better still, for every answer but a client's result (checked against its tool's schema
before it is sent), the claim and the message row are one statement
(`runtime/dbos/answer_message.claim_and_send`): one round trip from `approve()` to the wake.
"""

from __future__ import annotations

from typing import Any

from dbos import DBOSClient
from pydantic import ValidationError
from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from helix_dbos.api.answers import Answer, Approval, ClientResult, Denial, HumanInput
from helix_dbos.errors import InvalidAnswerError
from helix_dbos.runtime.dbos import dbos_internals
from helix_dbos.runtime.waits.hitl import ANSWER_MODELS, TOPICS
from helix_dbos.store.repository import SQLConnection, ToolCallKind
from helix_dbos.store.storable import check_storable


def answer_kind(answer: object) -> ToolCallKind:
    """The kind of wait `answer` is for; `InvalidAnswerError` if it is no `Answer`."""
    if not isinstance(answer, Approval | Denial | ClientResult | HumanInput):
        raise InvalidAnswerError(
            f"Not an answer: {type(answer).__name__}; give Approval, Denial, ClientResult "
            "or HumanInput"
        )
    return answer.kind


def answer_payload(
    session_id: str, tool_call_id: str, answer: Answer, **also: str | None
) -> dict[str, Any]:
    """The message an answer sends on its kind's topic (docs/human-in-the-loop.md),
    refused (`InvalidAnswerError`, or `ValueError` naming the field) unless the run can
    take it and the database can store it. `also`: more fields to check as storable."""
    answer_kind(answer)
    if isinstance(answer, ClientResult) and answer.result is not None and answer.error is not None:
        raise InvalidAnswerError("Give either result or error, not both")
    payload = answer.payload(tool_call_id)
    check_storable(session_id=session_id, tool_call_id=tool_call_id, answer=payload, **also)
    try:
        ANSWER_MODELS[answer.kind].model_validate(payload)
    except ValidationError as exc:
        raise InvalidAnswerError(f"Malformed answer for tool call '{tool_call_id}': {exc}") from exc
    return payload


_SAME_DATABASE: dict[int, bool] = {}  # by id(engine): DBOS's system database is its database


def _same_database(engine: AsyncEngine) -> bool:
    same = _SAME_DATABASE.get(id(engine))
    if same is None:
        same = _SAME_DATABASE[id(engine)] = dbos_internals.system_database_is(engine.url)
    return same


def message_table(engine: AsyncEngine) -> str | None:
    """DBOS's message table, if a statement on helix's database can insert into it
    (`runtime/dbos/answer_message.claim_and_send`): DBOS's tables in this database, and the
    caller outside any workflow or step (inside one, `DBOS.send` records itself as a
    step, which a plain statement would not)."""
    if not dbos_internals.sends_in_transaction() or not _same_database(engine):
        return None
    return dbos_internals.notifications_table()


async def send_with_claim(
    engine: AsyncEngine,
    conn: SQLConnection,
    workflow_id: str,
    message: Any,
    topic: str,
    idempotency_key: str,
) -> bool:
    """Insert the message in `conn`'s transaction; False (nothing done) where that is
    not possible: the caller then sends with `DBOS.send`."""
    if not isinstance(conn, AsyncConnection) or not dbos_internals.sends_in_transaction():
        return False
    if not _same_database(engine):
        return False

    def send(sync_conn: Connection) -> None:
        dbos_internals.send_in_transaction(sync_conn, workflow_id, message, topic, idempotency_key)

    await conn.run_sync(send)
    return True


def send_answer_by_client(
    client: DBOSClient, workflow_id: str, run_id: str, kind: ToolCallKind, payload: dict[str, Any]
) -> None:
    """Send an answer from a process that does not launch DBOS (the CLI), under the key
    the Python API uses, so an answer is applied once whichever way it came."""
    client.send(
        workflow_id, payload, TOPICS[kind], idempotency_key=f"{run_id}:{payload['tool_call_id']}"
    )


def notify_waits_by_client(
    client: DBOSClient, workflow_id: str, run_id: str, kinds: list[ToolCallKind], reason: str | None
) -> None:
    """A notice on each topic a waiting run listens on ends its wait at once (an
    interrupt or an abort from the CLI), under the keys `RunControl` uses."""
    for kind in kinds:
        client.send(
            workflow_id,
            {"interrupt": True, "reason": reason},
            TOPICS[kind],
            idempotency_key=f"{run_id}:interrupt:{kind}",
        )
