"""`HelixDBOS`'s answers and run control, with their `_sync` twins: `answer()` (and
its older spellings approve, deny, submit_tool_result, submit_human_input), the calls
waiting for them, interrupt and abort. Each delegates to `RunControl` (or, for the
pending calls, `SessionReads`)."""

from __future__ import annotations

import contextlib
from typing import Any

from helix_dbos.api.answers import Answer, ClientResult, Denial, HumanInput, verdict
from helix_dbos.runtime.control.run_control import RunControl
from helix_dbos.runtime.process.event_loop import sync_twin
from helix_dbos.runtime.sessions.session_queue import SessionQueue
from helix_dbos.runtime.sessions.session_reads import SessionReads
from helix_dbos.runtime.steps.results import PendingToolCall


class RunControlMethods:
    """A mixin of `HelixDBOS`: the methods a human's (or a client's) answer comes in by."""

    _control: RunControl
    _reads: SessionReads
    _queue: SessionQueue

    async def answer(self, session_id: str, tool_call_id: str, answer: Answer) -> None:
        """Answer a call that waits for a human: `Approval()`/`Denial(reason)` for an
        approval request, `ClientResult(result)` (or `ClientResult(error=...)`) for a
        client tool, `HumanInput(text, approved=...)` for `__pause_for_human__`. The call
        is found through the root session too (a sub-agent's or companion's call). The
        one way every answer goes in: the methods below, the HTTP routes and the
        protocols call it. Refused with `InvalidAnswerError` (wrong kind, malformed),
        `ToolCallAlreadyAnsweredError`, `ToolCallNotFoundError`,
        `AmbiguousToolCallError` or `RunOnOtherVersionError`."""
        await self._control.answer(session_id, tool_call_id, answer)

    async def approve(
        self,
        session_id: str,
        tool_call_id: str,
        approved: bool = True,
        *,
        reason: str | None = None,
    ) -> None:
        """Answer an approval request; the tool runs with its original input if approved.
        Same as `answer(session_id, tool_call_id, Approval(reason))` (or `Denial`)."""
        await self.answer(session_id, tool_call_id, verdict(approved, reason))

    async def deny(self, session_id: str, tool_call_id: str, *, reason: str | None = None) -> None:
        """`answer(session_id, tool_call_id, Denial(reason))`."""
        await self.answer(session_id, tool_call_id, Denial(reason))

    async def submit_tool_result(
        self, session_id: str, tool_call_id: str, result: Any = None, *, error: str | None = None
    ) -> None:
        """Hand in a client-executed tool's result (or its error):
        `answer(session_id, tool_call_id, ClientResult(result, error))`."""
        await self.answer(session_id, tool_call_id, ClientResult(result, error))

    async def submit_human_input(
        self,
        session_id: str,
        tool_call_id: str,
        human_input: str | None = None,
        *,
        approved: bool | None = None,
    ) -> None:
        """Answer a `__pause_for_human__` question:
        `answer(session_id, tool_call_id, HumanInput(human_input, approved))`."""
        await self.answer(session_id, tool_call_id, HumanInput(human_input, approved))

    async def pending_tool_calls(self, session_id: str) -> list[PendingToolCall]:
        """Calls waiting for a human in the session and in every session below it (its
        sub-agents' and companions', theirs), the session's own first. Answer any of
        them through the root session (seed 002)."""
        return await self._reads.pending_tool_calls(session_id)

    async def interrupt(self, session_id: str, *, reason: str | None = None) -> list[str]:
        """Stop the live runs of the session's tree (its own, its sub-agents', companions',
        theirs) at their next step boundary, or at once when waiting for a human; each ends
        `interrupted` and `resume()` continues it. Returns the run ids reached."""
        return await self._control.interrupt(session_id, reason)

    async def abort(self, session_id: str, *, reason: str | None = None) -> list[str]:
        """Cancel the live runs of the session's tree now: running tools are stopped, a
        wait for a human ends, dangling tool calls get error results, each run ends
        `aborted`. Returns the run ids reached; then a message stored meanwhile (double
        texting) starts its run."""
        reached = await self._control.abort(session_id, reason)
        with contextlib.suppress(Exception):  # else the reconcile sweep starts it
            await self._queue.start_next(session_id)
        return reached

    answer_sync = sync_twin(answer)
    approve_sync = sync_twin(approve)
    deny_sync = sync_twin(deny)
    submit_tool_result_sync = sync_twin(submit_tool_result)
    submit_human_input_sync = sync_twin(submit_human_input)
    pending_tool_calls_sync = sync_twin(pending_tool_calls)
    interrupt_sync = sync_twin(interrupt)
    abort_sync = sync_twin(abort)
