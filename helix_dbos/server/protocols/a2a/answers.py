"""A client's message to a task that waits (`TASK_STATE_INPUT_REQUIRED`) as helix answers.

A data part `{"tool_call_id": ..., "approved": true|false, "reason": ...}` answers an
approval, `{"human_input": ...}` a human-input request and `{"result": ...}` (or
`{"error": ...}`) a client tool; `tool_call_id` may be left out when one call waits. A
plain text answers the one waiting call: "yes"/"approve" or "no"/"deny" an approval,
the text itself as human input. Anything else is an `InvalidParamsError` naming the
calls that wait.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from a2a.helpers import get_data_parts, get_text_parts
from a2a.types import Message
from a2a.utils.errors import InvalidParamsError

from helix_dbos.api.runs import PendingToolCall

YES = frozenset({"yes", "y", "approve", "approved", "ok", "allow"})
NO = frozenset({"no", "n", "deny", "denied", "reject", "rejected"})


@dataclass(frozen=True)
class Answer:
    """One answer to one waiting call (of the task's session or a sub-agent's)."""

    call: PendingToolCall
    approved: bool | None = None
    reason: str | None = None
    human_input: Any = None
    result: Any = None
    error: str | None = None


def _pick(pending: Sequence[PendingToolCall], call_id: Any) -> PendingToolCall:
    waiting = ", ".join(f"{p.tool_call_id} ({p.kind} for {p.tool_name})" for p in pending)
    if call_id is None:
        if len(pending) == 1:
            return pending[0]
        raise InvalidParamsError(
            message=f"Several calls wait ({waiting}): name one with a data part's tool_call_id"
        )
    for p in pending:
        if p.tool_call_id == call_id:
            return p
    raise InvalidParamsError(message=f"No call {call_id!r} waits; waiting: {waiting}")


def _from_data(data: dict[str, Any], pending: Sequence[PendingToolCall]) -> Answer:
    call = _pick(pending, data.get("tool_call_id"))
    if call.kind == "approval":
        approved = data.get("approved")
        if not isinstance(approved, bool):
            raise InvalidParamsError(
                message=f"{call.tool_call_id} waits for an approval: send {{'approved': true|false}}"
            )
        return Answer(call, approved=approved, reason=_reason(data.get("reason")))
    if call.kind == "human_input":
        if "human_input" not in data:
            raise InvalidParamsError(
                message=f"{call.tool_call_id} waits for human input: send {{'human_input': ...}}"
            )
        approved = data.get("approved")
        return Answer(
            call,
            human_input=data["human_input"],
            approved=approved if isinstance(approved, bool) else None,
        )
    if "result" not in data and "error" not in data:
        raise InvalidParamsError(
            message=f"{call.tool_call_id} waits for a client tool's result: send "
            "{'result': ...} or {'error': '...'}"
        )
    error = data.get("error")
    return Answer(call, result=data.get("result"), error=None if error is None else str(error))


def _reason(value: Any) -> str | None:
    return None if value is None else str(value)


def _from_text(text: str, pending: Sequence[PendingToolCall]) -> Answer:
    call = _pick(pending, None)
    if call.kind == "approval":
        word = text.strip().lower().rstrip(".!")
        if word in YES or word in NO:
            return Answer(call, approved=word in YES)
        raise InvalidParamsError(
            message=f"{call.tool_call_id} waits for an approval: answer 'yes' or 'no' "
            "(or a data part {'approved': true|false, 'reason': ...})"
        )
    if call.kind == "human_input":
        return Answer(call, human_input=text)
    return Answer(call, result=text)


def parse_answers(message: Message, pending: Sequence[PendingToolCall]) -> list[Answer]:
    """The answers `message` carries (at least one), checked against what waits."""
    data = [d for d in get_data_parts(message.parts) if isinstance(d, dict)]
    if data:
        answers = [_from_data(d, pending) for d in data]
    else:
        text = "\n".join(get_text_parts(message.parts)).strip()
        if not text:
            raise InvalidParamsError(message="The message answers nothing: it has no text or data")
        answers = [_from_text(text, pending)]
    ids = [a.call.tool_call_id for a in answers]
    if len(set(ids)) != len(ids):
        raise InvalidParamsError(message="The message answers one call twice")
    return answers
