"""helix stream chunks -> AG-UI events, for one AG-UI run (`server/protocols/ag_ui.py`).

Stateful only within one response: it opens a text message before the first text delta
of a step and closes it before anything else, and remembers the tool calls it announced.
Everything it emits is derived from the chunks (ids included), so a stream replayed from
the run's first chunk, or resumed after a seq, says the same thing again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    Interrupt,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    StateDeltaEvent,
    StateSnapshotEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from helix_dbos.api.answers import HUMAN_REQUESTS as HUMAN_REQUESTS
from helix_dbos.streaming.chunks import StreamChunk

# Interrupt.reason by helix chunk type.
REASONS = {
    "tool_approval_request": "tool_approval",
    "client_tool_request": "client_tool",
    "human_input_request": "human_input",
}
APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["approved"],
}


@dataclass(frozen=True)
class Frame:
    """One AG-UI event, and the helix seq a client that saw it may resume after (only on
    the last event of a chunk, so a resume never splits one chunk's events)."""

    event: BaseEvent
    seq: int | None = None

    def sse(self) -> str:
        data = self.event.model_dump_json(by_alias=True)
        head = f"id: {self.seq}\n" if self.seq is not None else ""
        return f"{head}data: {data}\n\n"


def json_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def pointer(key: str) -> str:
    """A JSON Pointer to a top-level key (RFC 6901 escapes)."""
    return "/" + key.replace("~", "~0").replace("/", "~1")


@dataclass
class Translator:
    thread_id: str
    run_id: str
    # Calls announced earlier (a resumed run's answered calls): their TOOL_CALL_START is
    # not repeated, only their result.
    announced: set[str] = field(default_factory=set)
    _open_message: str | None = None

    def chunk(self, chunk: StreamChunk) -> list[Frame]:
        """The events of one chunk (terminal chunks: see `finish`)."""
        if chunk.via_run_id is not None and chunk.type not in HUMAN_REQUESTS:
            return []  # a sub-agent's own work stays inside helix
        events = self._events(chunk)
        return _stamp(events, chunk.seq)

    def _events(self, chunk: StreamChunk) -> list[BaseEvent]:
        p = chunk.payload
        if chunk.type == "text_delta":
            delta = str(p.get("delta") or "")
            if not delta:
                return []
            opened: list[BaseEvent] = []
            if self._open_message is None:
                self._open_message = f"msg_{chunk.run_id}_{chunk.step}"
                opened.append(TextMessageStartEvent(message_id=self._open_message))
            return [*opened, TextMessageContentEvent(message_id=self._open_message, delta=delta)]
        if chunk.type == "tool_start":
            return self._close() + self._announce(
                p["tool_call_id"], p["tool_name"], p.get("arguments")
            )
        if chunk.type in HUMAN_REQUESTS:
            return self._close() + self._announce(p["tool_call_id"], p["tool_name"], p.get("input"))
        if chunk.type == "tool_end":
            content = p.get("result") if p.get("success", True) else {"error": p.get("error")}
            return [
                *self._close(),
                ToolCallResultEvent(
                    message_id=f"result_{p['tool_call_id']}",
                    tool_call_id=p["tool_call_id"],
                    content=json_text(content),
                ),
            ]
        if chunk.type == "state_patch":
            ops: list[Any] = [
                {"op": "add", "path": pointer(k), "value": v} for k, v in p.get("set", {}).items()
            ]
            ops += [{"op": "remove", "path": pointer(k)} for k in p.get("removed", [])]
            return [StateDeltaEvent(delta=ops)] if ops else []
        if chunk.type == "custom":
            return [CustomEvent(name=str(p.get("event")), value=p.get("data"))]
        return []

    def _announce(self, call_id: str, name: str, arguments: Any) -> list[BaseEvent]:
        if call_id in self.announced:
            return []
        self.announced.add(call_id)
        events: list[BaseEvent] = [ToolCallStartEvent(tool_call_id=call_id, tool_call_name=name)]
        args = json_text(arguments if arguments is not None else {})
        events.append(ToolCallArgsEvent(tool_call_id=call_id, delta=args))
        events.append(ToolCallEndEvent(tool_call_id=call_id))
        return events

    def _close(self) -> list[BaseEvent]:
        if self._open_message is None:
            return []
        closed, self._open_message = self._open_message, None
        return [TextMessageEndEvent(message_id=closed)]

    # --- the run's end -----------------------------------------------------------------

    def finish(self, chunk: StreamChunk, state: dict[str, Any] | None) -> list[Frame]:
        """RUN_FINISHED (with the session's state before it) or RUN_ERROR for a
        terminal chunk."""
        events = self._close()
        p = chunk.payload
        if chunk.type == "run_completed":
            if state is not None:
                events.append(StateSnapshotEvent(snapshot=state))
            outcome = RunFinishedSuccessOutcome()
            events.append(self._finished(outcome, result=p.get("output")))
        elif chunk.type == "run_failed":
            # A control's stop (`usage_limit`, `guardrail`) is the code; else `run_failed`.
            code = str(p.get("stop_reason") or "run_failed")
            events.append(RunErrorEvent(message=str(p.get("error") or "failed"), code=code))
        else:  # aborted, or interrupted (helix's own stop): stopped, not failed
            events.append(self._finished(RunFinishedCancelledOutcome()))
        return _stamp(events, chunk.seq)

    def interrupt(self, requests: Iterable[StreamChunk]) -> list[Frame]:
        """The run waits for a human: announce each call, then RUN_FINISHED whose outcome
        names every pending call (`Interrupt.id` = the helix tool call id)."""
        events: list[BaseEvent] = self._close()
        interrupts: list[Interrupt] = []
        last = None
        for chunk in requests:
            p = chunk.payload
            last = chunk.seq
            events += self._announce(p["tool_call_id"], p["tool_name"], p.get("input"))
            interrupts.append(_interrupt(chunk))
        events.append(self._finished(RunFinishedInterruptOutcome(interrupts=interrupts)))
        return _stamp(events, last)

    def error(self, message: str, code: str) -> list[Frame]:
        return _stamp([*self._close(), RunErrorEvent(message=message, code=code)], None)

    def _finished(self, outcome: Any, result: Any = None) -> RunFinishedEvent:
        return RunFinishedEvent(
            thread_id=self.thread_id, run_id=self.run_id, result=result, outcome=outcome
        )


def _interrupt(chunk: StreamChunk) -> Interrupt:
    p = chunk.payload
    reason = REASONS[chunk.type]
    name = p["tool_name"]
    deadline = p.get("deadline")
    if isinstance(deadline, (int, float)):  # older rows: an epoch
        deadline = datetime.fromtimestamp(deadline).astimezone().isoformat()
    message = {
        "tool_approval": f"Approve the call to '{name}'?",
        "client_tool": f"Run the client tool '{name}' and send its result",
        "human_input": f"'{name}' asks for your input",
    }[reason]
    return Interrupt(
        id=p["tool_call_id"],
        reason=reason,
        message=message,
        tool_call_id=p["tool_call_id"],
        response_schema=APPROVAL_SCHEMA if reason == "tool_approval" else None,
        expires_at=str(deadline) if deadline is not None else None,
        metadata={"helix": {"tool_name": name, "input": p.get("input")}},
    )


def _stamp(events: list[BaseEvent], seq: int | None) -> list[Frame]:
    return [Frame(e, seq if i == len(events) - 1 else None) for i, e in enumerate(events)]
