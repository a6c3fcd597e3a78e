"""An AG-UI `resume` (or a front end's tool messages) -> helix answers to pending calls.

Each `ResumeEntry.interruptId` is a helix tool call id. What the payload means depends on
what the call waits for:

- an approval: `true`/`false`, or `{"approved": bool, "reason": str}`; `cancelled`
  rejects it;
- a client tool: the payload is the tool's result; `cancelled` answers it with an error;
- a human input: a string, or `{"human_input": str, "approved": bool}`; `cancelled`
  answers `approved: false`.

An entry whose call was answered already (the same input sent again, on a reconnect) is
left alone, so sending one input twice answers once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ag_ui.core import ResumeEntry, RunAgentInput, ToolMessage
from fastapi import HTTPException

from helix_dbos.api.answers import Answer, ClientResult, Denial, HumanInput, verdict
from helix_dbos.facade.helix import HelixDBOS
from helix_dbos.server.http.route_context import ServerContext
from helix_dbos.server.protocols.ag_ui_events import HUMAN_REQUESTS
from helix_dbos.streaming.chunks import StreamChunk

CANCELLED = "cancelled by the client"


@dataclass(frozen=True)
class ResumePoint:
    """Where a resumed AG-UI run's stream starts: the helix run that waited, after the
    last of the answered calls' request chunks."""

    run_id: str
    after_seq: int
    call_ids: frozenset[str]


def trailing_tool_results(body: RunAgentInput) -> list[ToolMessage]:
    """The tool messages that end the input (AG-UI's front-end tool convention: the
    client sends its tool's result as a tool message and runs the agent again)."""
    found: list[ToolMessage] = []
    for message in reversed(body.messages):
        if not isinstance(message, ToolMessage):
            break
        found.append(message)
    return found[::-1]


def entries_of(body: RunAgentInput, client_calls: set[str]) -> list[ResumeEntry]:
    """The input's `resume`, or else its trailing tool messages that answer client tool
    calls of the thread (`client_calls`)."""
    if body.resume:
        return list(body.resume)
    return [
        ResumeEntry(interrupt_id=m.tool_call_id, status="resolved", payload=_parsed(m))
        for m in trailing_tool_results(body)
        if m.tool_call_id in client_calls
    ]


def _parsed(message: ToolMessage) -> Any:
    content = message.content
    if not isinstance(content, str):
        return [part.model_dump(by_alias=True) for part in content]
    try:
        return json.loads(content)
    except ValueError:
        return content


async def find_requests(helix: HelixDBOS, session_id: str, ids: set[str]) -> list[StreamChunk]:
    """The request chunks of `ids` in the session's latest runs (newest first)."""
    found: dict[str, StreamChunk] = {}
    for run in reversed(await helix.list_runs(session_id)):
        async for chunk in helix.stream(session_id, run_id=run.run_id, follow=False):
            if chunk.type in HUMAN_REQUESTS and chunk.payload.get("tool_call_id") in ids:
                found.setdefault(chunk.payload["tool_call_id"], chunk)
        if len(found) == len(ids):
            break
    return list(found.values())


async def apply_resume(
    ctx: ServerContext, session_id: str, entries: list[ResumeEntry]
) -> ResumePoint:
    """Answer the entries' pending calls (every entry checked first: a 4xx answers
    nothing), and say where the continued run's stream starts."""
    helix = ctx.helix
    ids = {e.interrupt_id for e in entries}
    if len(ids) != len(entries):
        raise HTTPException(status_code=422, detail="resume answers an interrupt twice")
    ctx.check_ids(**{f"resume[{i}].interruptId": e.interrupt_id for i, e in enumerate(entries)})
    requests = await find_requests(helix, session_id, ids)
    unknown = ids - {c.payload["tool_call_id"] for c in requests}
    if unknown:
        raise HTTPException(
            status_code=404,
            detail=f"thread '{session_id}' has no interrupt {', '.join(sorted(unknown))}",
        )
    runs = {c.via_run_id or c.run_id for c in requests}
    if len(runs) != 1:
        raise HTTPException(status_code=422, detail="resume answers interrupts of several runs")
    pending = {p.tool_call_id: p.kind for p in await helix.pending_tool_calls(session_id)}
    answers = [(e, pending[e.interrupt_id]) for e in entries if e.interrupt_id in pending]
    for entry, kind in answers:
        ctx.check_result_size(f"resume payload of {entry.interrupt_id}", entry.payload)
        _check(entry, kind)
    for entry, kind in answers:
        await _answer(helix, session_id, entry, kind)
    run_id = runs.pop()
    assert run_id is not None
    return ResumePoint(run_id, max(c.seq for c in requests), frozenset(ids))


def _check(entry: ResumeEntry, kind: str) -> None:
    if entry.status == "cancelled":
        return
    payload = entry.payload
    if kind == "approval" and not (
        isinstance(payload, bool)
        or (isinstance(payload, dict) and isinstance(payload.get("approved"), bool))
    ):
        raise HTTPException(
            status_code=422,
            detail=f"interrupt {entry.interrupt_id} is an approval: its payload is true, "
            'false or {"approved": bool, "reason": str}',
        )
    if kind == "human_input" and not (payload is None or isinstance(payload, (str, dict))):
        raise HTTPException(
            status_code=422,
            detail=f"interrupt {entry.interrupt_id} asks for input: its payload is a string "
            'or {"human_input": str, "approved": bool}',
        )


async def _answer(helix: HelixDBOS, session_id: str, entry: ResumeEntry, kind: str) -> None:
    await helix.answer(session_id, entry.interrupt_id, _typed(entry, kind))


def _typed(entry: ResumeEntry, kind: str) -> Answer:
    """The resume entry as the answer its interrupt's kind takes (`_check` passed)."""
    payload, cancelled = entry.payload, entry.status == "cancelled"
    if kind == "approval":
        if cancelled:
            return Denial(CANCELLED)
        if isinstance(payload, bool):
            return verdict(payload)
        assert isinstance(payload, dict)  # `_check` let nothing else through
        reason = payload.get("reason")
        return verdict(payload["approved"], str(reason) if reason else None)
    if kind == "client":
        return ClientResult(error=CANCELLED) if cancelled else ClientResult(payload)
    if cancelled:
        return HumanInput(None, approved=False)
    if isinstance(payload, dict):
        text = payload.get("human_input")
        approved = payload.get("approved")
        return HumanInput(
            str(text) if text is not None else None,
            approved=approved if isinstance(approved, bool) else None,
        )
    return HumanInput(payload)
