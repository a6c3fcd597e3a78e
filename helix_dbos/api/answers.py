"""The answers to a call that waits for a human, and the one table of such waits.

`HelixDBOS.answer(session_id, tool_call_id, answer)` takes one of `Approval`, `Denial`,
`ClientResult` or `HumanInput`; the HTTP routes, the protocols and the CLI build one of
these and go through the same path. `HUMAN_REQUEST_KINDS` says, once, for each kind of
wait: its stream chunk, the DBOS topic its answer arrives on, the word a run's
`waiting_for` uses, and how a person answers it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from helix_dbos.api.runs import ToolCallKind


@dataclass(frozen=True)
class Approval:
    """Run the approval-gated call with its original input."""

    reason: str | None = None
    kind: ClassVar[ToolCallKind] = "approval"

    def payload(self, tool_call_id: str) -> dict[str, Any]:
        return {"tool_call_id": tool_call_id, "approved": True, "reason": self.reason}


@dataclass(frozen=True)
class Denial:
    """Refuse the approval-gated call; the model gets the reason."""

    reason: str | None = None
    kind: ClassVar[ToolCallKind] = "approval"

    def payload(self, tool_call_id: str) -> dict[str, Any]:
        return {"tool_call_id": tool_call_id, "approved": False, "reason": self.reason}


@dataclass(frozen=True)
class ClientResult:
    """A client-executed tool's result, or its error (not both)."""

    result: Any = None
    error: str | None = None
    kind: ClassVar[ToolCallKind] = "client"

    def payload(self, tool_call_id: str) -> dict[str, Any]:
        if self.error is not None:
            return {"tool_call_id": tool_call_id, "error": self.error}
        return {"tool_call_id": tool_call_id, "result": self.result}


@dataclass(frozen=True)
class HumanInput:
    """The answer to a `__pause_for_human__` question: text, and optionally a verdict."""

    text: str | None = None
    approved: bool | None = None
    kind: ClassVar[ToolCallKind] = "human_input"

    def payload(self, tool_call_id: str) -> dict[str, Any]:
        return {"tool_call_id": tool_call_id, "human_input": self.text, "approved": self.approved}


Answer = Approval | Denial | ClientResult | HumanInput


def verdict(approved: bool, reason: str | None = None) -> Approval | Denial:
    """`Approval` or `Denial`, for a caller that holds a boolean."""
    return Approval(reason) if approved else Denial(reason)


@dataclass(frozen=True)
class HumanRequestKind:
    """One kind of wait for a human, everything that names it."""

    kind: ToolCallKind
    chunk_type: str  # the stream chunk that announces it
    topic: str  # the DBOS topic its answer arrives on
    waiting_for: str  # in a run's `waiting_for`
    described: str  # "waiting for ..." in progress lines
    answered_with: str  # the Python API's way to answer it
    cli_command: str  # the CLI's way to answer it, in an error
    shell_hint: str  # the same, with the ids to fill in, in progress lines


HUMAN_REQUEST_KINDS: dict[ToolCallKind, HumanRequestKind] = {
    k.kind: k
    for k in (
        HumanRequestKind(
            "approval",
            "tool_approval_request",
            "helix.approval",
            "approval",
            "approval",
            "approve()/deny() (or answer() with Approval()/Denial())",
            "helix-dbos approve / deny",
            "helix-dbos approve {session} {call}  (or deny)",
        ),
        HumanRequestKind(
            "client",
            "client_tool_request",
            "helix.tool_result",
            "client_tool",
            "the client's result",
            "submit_tool_result() (or answer() with ClientResult())",
            "helix-dbos submit",
            "helix-dbos submit {session} {call} --result JSON",
        ),
        HumanRequestKind(
            "human_input",
            "human_input_request",
            "helix.human_input",
            "human_input",
            "human input",
            "submit_human_input() (or answer() with HumanInput())",
            "the inbox or submit_human_input()",
            "the inbox, or helix.submit_human_input()",
        ),
    )
}
HUMAN_REQUESTS = frozenset(k.chunk_type for k in HUMAN_REQUEST_KINDS.values())
"""The stream chunk types that announce a wait for a human."""


def request_kind(kind: str) -> HumanRequestKind:
    """The entry of a `helix.tool_calls.kind` read from the database."""
    return HUMAN_REQUEST_KINDS[kind]  # type: ignore[index]
