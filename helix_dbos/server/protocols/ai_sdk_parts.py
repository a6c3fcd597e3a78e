"""Helix stream chunks as the Vercel AI SDK's UI message chunks (UI message stream v1).

One helix run is one assistant UI message (`messageId` = the run id); each helix step is
a UI step (`start-step` ... `finish-step`). The mapper is pure and stateful: it keeps
which text or reasoning part is open and which tool calls the client has seen, so that
every chunk it emits is one the AI SDK's reader accepts in that order (a tool's output
after its input, an approval request on a tool part it already has).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from helix_dbos.api.answers import HUMAN_REQUESTS as HUMAN_REQUESTS
from helix_dbos.streaming.chunks import StreamChunk

UIChunk = dict[str, Any]

# Chunks with no UI part of their own: passed on as transient `data-helix-event` parts
# (`onData` sees them; they are not kept in the message).
EVENT_CHUNKS = frozenset(
    {
        "run_started",
        "run_stopped",
        "message_queued",
        "run_interrupted_by_message",
        "run_rolled_back",
        "message_steered",
        "error",
    }
)
FINISH_REASONS = {
    "run_completed": "stop",
    "run_failed": "error",
    "run_aborted": "other",
    "run_interrupted": "interrupted",
}
# The chunks that make parts of a step (the others do not open one).
STEP_CHUNKS = frozenset(
    {"text_delta", "thinking", "tool_start", "tool_end", "state_patch", "custom"} | HUMAN_REQUESTS
)
SUB_AGENT_STEP = -1  # the step opened for sub-agents' requests (helix steps count from 0)
_DATA_NAME = re.compile(r"[^A-Za-z0-9_-]+")


def data_type(event: str) -> str:
    """A custom event's name as a `data-*` part type (letters, digits, `_` and `-`)."""
    return "data-" + (_DATA_NAME.sub("-", event).strip("-") or "custom")


@dataclass
class UIPartMapper:
    """Maps the chunks of one run (`run_id` of `session_id`) to UI message chunks."""

    session_id: str
    run_id: str
    step: int | None = None
    text_id: str | None = None
    reasoning_count: int = 0
    text_count: int = 0
    announced: set[str] = field(default_factory=set)
    approvals: set[str] = field(default_factory=set)
    denied: set[str] = field(default_factory=set)
    client_outputs: set[str] = field(default_factory=set)  # the client holds these outputs
    finished: bool = False

    def start(self) -> list[UIChunk]:
        return [{"type": "start", "messageId": self.run_id}]

    def own(self, chunk: StreamChunk) -> bool:
        return chunk.run_id == self.run_id and chunk.via_run_id is None

    def map(
        self, chunk: StreamChunk, resolved: dict[str, tuple[bool, str | None]]
    ) -> list[UIChunk]:
        """The UI chunks for `chunk`. `resolved` holds, for a `run_resumed` chunk, the
        approvals it closed: call id -> (approved, reason)."""
        kind, p, own = chunk.type, chunk.payload, self.own(chunk)
        out: list[UIChunk] = []
        if own and kind in STEP_CHUNKS and chunk.step is not None and chunk.step != self.step:
            out += [*self._close_step(), {"type": "start-step"}]
            self.step = chunk.step
        if kind in HUMAN_REQUESTS and not own and self.step != SUB_AGENT_STEP:
            # A sub-agent's request in a step of its own: `useChat` sends the answers on
            # its own once every tool part of the last step is answered, and the
            # sub-agent's call in the step before stays open until the sub-agent ends.
            out += [*self._close_step(), {"type": "start-step"}]
            self.step = SUB_AGENT_STEP
        if kind in HUMAN_REQUESTS:
            return out + self._request(kind, p)
        if kind == "run_resumed":
            for call_id in p.get("tool_call_ids", []):
                if call_id in resolved:
                    out += self._approval_answered(call_id, *resolved[call_id])
            return out
        if kind == "tool_end" and (own or p.get("tool_call_id") in self.announced):
            # a start never seen is said now (its input is not in the end's payload)
            out += self._announce(p["tool_call_id"], p["tool_name"], None)
            return out + self._tool_end(p)
        if own and kind in FINISH_REASONS:
            return out + self._finish(kind, p)
        if own and kind in OWN_PARTS:
            return out + OWN_PARTS[kind](self, p)
        if kind in EVENT_CHUNKS or not own:
            out.append(_event(chunk))
        return out

    def _text(self, p: dict[str, Any]) -> list[UIChunk]:
        out: list[UIChunk] = []
        if self.text_id is None:
            self.text_count += 1
            self.text_id = f"{self.run_id}-text-{self.text_count}"
            out.append({"type": "text-start", "id": self.text_id})
        out.append({"type": "text-delta", "id": self.text_id, "delta": str(p.get("delta", ""))})
        return out

    def _thinking(self, p: dict[str, Any]) -> list[UIChunk]:
        self.reasoning_count += 1
        rid = f"{self.run_id}-reasoning-{self.reasoning_count}"
        return [
            *self._close_text(),
            {"type": "reasoning-start", "id": rid},
            {"type": "reasoning-delta", "id": rid, "delta": str(p.get("text", ""))},
            {"type": "reasoning-end", "id": rid},
        ]

    def _tool_start(self, p: dict[str, Any]) -> list[UIChunk]:
        return self._announce(p["tool_call_id"], p["tool_name"], p.get("arguments"))

    def _request(self, kind: str, p: dict[str, Any]) -> list[UIChunk]:
        call_id = p["tool_call_id"]
        out = self._announce(call_id, p["tool_name"], p.get("input"))
        if kind == "tool_approval_request":
            self.approvals.add(call_id)
            out.append(
                {"type": "tool-approval-request", "approvalId": call_id, "toolCallId": call_id}
            )
        return out

    def _state(self, p: dict[str, Any]) -> list[UIChunk]:
        return [{"type": "data-helix-state", "data": p}]

    def _custom(self, p: dict[str, Any]) -> list[UIChunk]:
        return [{"type": data_type(str(p.get("event", ""))), "data": p.get("data")}]

    def _output(self, p: dict[str, Any]) -> list[UIChunk]:
        if isinstance(p.get("output"), str):
            return []  # the answer's text: its text parts say it already
        return [{"type": "data-helix-output", "data": p.get("output")}]

    def waiting(self) -> list[UIChunk]:
        """The end of this response while the run waits for the client's answers."""
        self.finished = True
        return [*self._close_step(), {"type": "finish", "finishReason": "tool-calls"}]

    def _announce(self, call_id: str, tool_name: str, arguments: Any) -> list[UIChunk]:
        if call_id in self.announced:
            return []
        self.announced.add(call_id)
        return [
            *self._close_text(),
            {"type": "tool-input-start", "toolCallId": call_id, "toolName": tool_name},
            {
                "type": "tool-input-available",
                "toolCallId": call_id,
                "toolName": tool_name,
                "input": arguments if arguments is not None else {},
            },
        ]

    def _approval_answered(self, call_id: str, approved: bool, reason: str | None) -> list[UIChunk]:
        if call_id not in self.approvals:
            return []
        answer: UIChunk = {"type": "tool-approval-response", "approvalId": call_id}
        answer["approved"] = approved
        if reason is not None:
            answer["reason"] = reason
        out = [answer]
        if not approved:
            self.denied.add(call_id)
            out.append({"type": "tool-output-denied", "toolCallId": call_id})
        return out

    def _tool_end(self, p: dict[str, Any]) -> list[UIChunk]:
        call_id = p["tool_call_id"]
        if call_id in self.denied or call_id in self.client_outputs:
            return []  # `tool-output-denied` said it already, or the client gave the output
        out = self._close_text()
        if p.get("success"):
            out.append(
                {"type": "tool-output-available", "toolCallId": call_id, "output": p.get("result")}
            )
        else:
            error = p.get("error") or "The tool failed"
            out.append(
                {"type": "tool-output-error", "toolCallId": call_id, "errorText": str(error)}
            )
        return out

    def _finish(self, kind: str, p: dict[str, Any]) -> list[UIChunk]:
        self.finished = True
        out = self._close_step()
        if kind == "run_failed":
            if p.get("stop_reason"):  # a control's stop; before `error`, where a client stops
                metadata = {"helix": {"stop_reason": p["stop_reason"]}}
                out.append({"type": "message-metadata", "messageMetadata": metadata})
            out.append({"type": "error", "errorText": str(p.get("error") or "The run failed")})
        elif kind == "run_aborted":
            out.append({"type": "abort", "reason": str(p.get("error") or "aborted")})
        out.append({"type": "finish", "finishReason": FINISH_REASONS[kind]})
        return out

    def _close_text(self) -> list[UIChunk]:
        if self.text_id is None:
            return []
        closed, self.text_id = self.text_id, None
        return [{"type": "text-end", "id": closed}]

    def _close_step(self) -> list[UIChunk]:
        if self.step is None:
            return self._close_text()
        self.step = None
        return [*self._close_text(), {"type": "finish-step"}]


def _event(chunk: StreamChunk) -> UIChunk:
    """A chunk with no part of its own, for `onData` (transient: not kept in the message)."""
    data = {
        "type": chunk.type,
        "session_id": chunk.session_id,
        "run_id": chunk.run_id,
        "agent_name": chunk.agent_name,
        "payload": chunk.payload,
    }
    return {"type": "data-helix-event", "data": data, "transient": True}


OWN_PARTS = {
    "text_delta": UIPartMapper._text,
    "thinking": UIPartMapper._thinking,
    "tool_start": UIPartMapper._tool_start,
    "state_patch": UIPartMapper._state,
    "custom": UIPartMapper._custom,
    "output": UIPartMapper._output,
}
