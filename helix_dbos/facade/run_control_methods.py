"""`HelixDBOS`'s answers and run control, with their `_sync` twins: approve, deny, a
client tool's result, human input, the calls waiting for them, interrupt and abort.
Each delegates to `RunControl` (or, for the pending calls, `SessionReads`)."""

from __future__ import annotations

import contextlib
from typing import Any

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

    async def approve(
        self,
        session_id: str,
        tool_call_id: str,
        approved: bool = True,
        *,
        reason: str | None = None,
    ) -> None:
        """Answer an approval request; the tool runs with its original input if approved."""
        await self._control.approve(session_id, tool_call_id, approved, reason)

    async def deny(self, session_id: str, tool_call_id: str, *, reason: str | None = None) -> None:
        await self.approve(session_id, tool_call_id, False, reason=reason)

    async def submit_tool_result(
        self, session_id: str, tool_call_id: str, result: Any = None, *, error: str | None = None
    ) -> None:
        """Hand in a client-executed tool's result (or its error)."""
        await self._control.submit_tool_result(session_id, tool_call_id, result, error)

    async def submit_human_input(
        self,
        session_id: str,
        tool_call_id: str,
        human_input: str | None = None,
        *,
        approved: bool | None = None,
    ) -> None:
        """Answer a `__pause_for_human__` question."""
        await self._control.submit_human_input(session_id, tool_call_id, human_input, approved)

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

    approve_sync = sync_twin(approve)
    deny_sync = sync_twin(deny)
    submit_tool_result_sync = sync_twin(submit_tool_result)
    submit_human_input_sync = sync_twin(submit_human_input)
    pending_tool_calls_sync = sync_twin(pending_tool_calls)
    interrupt_sync = sync_twin(interrupt)
    abort_sync = sync_twin(abort)
