"""Tool-call ids unique within a session: the key every answer and result is matched by.

A model's reply names its calls, and helix matches by that id everything that
follows: the human's approval, the client's result, the tool's result in the
transcript. OpenAI and Anthropic assign unique ids themselves, but compatible
servers and local models emit what they like: two calls under one id (one
Approve would run both), an id reused from an earlier step, an empty id, or
one too long to answer over HTTP. So each call keeps its provider's id only
when that id is safe (1-40 of `A-Z a-z 0-9 _ -`, the common ground of every
provider's format: Anthropic's pattern, OpenAI Chat Completions' 40-character
limit) and not used before in the session nor earlier in the same reply; any
other call gets a helix id, `helix_` and 24 hex digits of a hash of the run,
the step and the call's position, so the same reply always gets the same ids
(replays and recovery included). The provider sees helix's ids when the
transcript goes back to it: the call and its result carry the same one.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import TypeVar

from helix_dbos.orchestration.types import (
    Message,
    StepResult,
    SubAgentCall,
    ToolCall,
    ToolCallsStepResult,
)

MAX_CALL_ID_LENGTH = 40
HELIX_ID_PREFIX = "helix_"
_Call = TypeVar("_Call", ToolCall, SubAgentCall)
_SAFE_ID = re.compile(rf"[A-Za-z0-9_-]{{1,{MAX_CALL_ID_LENGTH}}}")


def is_safe_call_id(call_id: str) -> bool:
    """An id every provider accepts back and every client can send (URL- and shell-safe)."""
    return _SAFE_ID.fullmatch(call_id) is not None


def transcript_call_ids(messages: Iterable[Message]) -> set[str]:
    """Every tool-call id a transcript already holds (calls, and results)."""
    listed = messages if isinstance(messages, list) else list(messages)
    taken = {call.id for message in listed for call in message.tool_calls}
    taken.update(m.tool_call_id for m in listed if m.tool_call_id is not None)
    return taken


def helix_call_id(scope: str, position: int, attempt: int = 0) -> str:
    """The id helix gives the call at `position` of the reply `scope` names."""
    digest = hashlib.sha256(f"{scope}\x00{position}\x00{attempt}".encode()).hexdigest()
    return f"{HELIX_ID_PREFIX}{digest[:24]}"


@dataclass(frozen=True)
class Rekeyed:
    """A call that got a helix id, and why its provider's id could not stay."""

    provider_id: str
    call_id: str
    reason: str
    clash: bool  # another call has the id (a misbehaving model), not just its format


def unique_call_ids(
    result: StepResult, taken: Collection[str], scope: str
) -> tuple[StepResult, list[Rekeyed]]:
    """`result` with every tool and sub-agent call under an id unique in the session,
    and the calls that got a new one.

    `taken`: the ids the session's transcript holds; `scope`: names the reply
    (its run and step), so the ids helix gives are the same on every replay.
    Returns `result` itself when every id may stay.
    """
    if not isinstance(result, ToolCallsStepResult):
        return result, []
    ids = [c.id for c in result.tool_calls] + [c.id for c in result.sub_agent_calls]
    kept: set[str] = set()
    reasons: list[str | None] = []
    for call_id in ids:
        reason = _why_not_kept(call_id, taken, kept)
        reasons.append(reason)
        if reason is None:
            kept.add(call_id)
    if all(r is None for r in reasons):
        return result, []
    used = set(taken) | kept
    new_ids: list[str] = []
    rekeyed: list[Rekeyed] = []
    for position, (call_id, reason) in enumerate(zip(ids, reasons, strict=True)):
        if reason is not None:
            fresh = _fresh_id(scope, position, used)
            used.add(fresh)
            clash = is_safe_call_id(call_id)  # a safe id is re-keyed only when taken
            rekeyed.append(Rekeyed(call_id, fresh, reason, clash))
            call_id = fresh
        new_ids.append(call_id)
    count = len(result.tool_calls)
    tool_calls = [_with_id(c, i) for c, i in zip(result.tool_calls, new_ids[:count], strict=True)]
    sub_calls = [
        _with_id(c, i) for c, i in zip(result.sub_agent_calls, new_ids[count:], strict=True)
    ]
    update = {"tool_calls": tool_calls, "sub_agent_calls": sub_calls}
    return result.model_copy(update=update), rekeyed


def _why_not_kept(call_id: str, taken: Collection[str], kept: set[str]) -> str | None:
    if not call_id:
        return "is empty"
    if len(call_id) > MAX_CALL_ID_LENGTH:
        return f"is longer than {MAX_CALL_ID_LENGTH} characters"
    if not is_safe_call_id(call_id):
        return "has characters other than A-Z, a-z, 0-9, _ and -"
    if call_id in kept:
        return "is used by another call of the same reply"
    if call_id in taken:
        return "was used earlier in the session"
    return None


def _fresh_id(scope: str, position: int, used: set[str]) -> str:
    attempt = 0
    while (candidate := helix_call_id(scope, position, attempt)) in used:
        attempt += 1
    return candidate


def _with_id(call: _Call, call_id: str) -> _Call:
    return call if call.id == call_id else call.model_copy(update={"id": call_id})
