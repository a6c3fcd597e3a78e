"""Controlling runs from outside: answers to waiting tool calls (approve, deny, a client
tool's result, human input), interrupt and abort.

An answer is checked (pending, of its kind, well formed) and sent exactly once with
`DBOS.send` under a key; interrupt and abort reach the session's whole tree of runs.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import Any, cast

from dbos import DBOS

from helix_dbos.api.answers import Answer, request_kind
from helix_dbos.errors import (
    InvalidAnswerError,
    RunNotActiveError,
    SessionNotFoundError,
    ToolCallAlreadyAnsweredError,
    ToolCallNotFoundError,
    ToolOutputError,
)
from helix_dbos.log_events import RUN_ABORTED, gate_event, log_event
from helix_dbos.runtime.children.remote_children import abort_remote_children
from helix_dbos.runtime.dbos import dbos_internals
from helix_dbos.runtime.dbos.answer_message import claim_and_send
from helix_dbos.runtime.process.event_loop import on_target_loop
from helix_dbos.runtime.sessions.session_reads import SessionReads
from helix_dbos.runtime.steps.closing import close_run
from helix_dbos.runtime.steps.run_trace import emit_run_span
from helix_dbos.runtime.steps.step_types import GateKind
from helix_dbos.runtime.waits.answer_send import (
    answer_kind,
    answer_payload,
    message_table,
    send_with_claim,
)
from helix_dbos.runtime.waits.hitl import INTERRUPT_TOPIC, TOPICS, checked_client_result
from helix_dbos.runtime.waits.run_versions import refuse_unserved
from helix_dbos.store import repository as repo
from helix_dbos.store import tree
from helix_dbos.store.answer_claim import claim_answer, find_answer_target
from helix_dbos.store.storable import check_storable
from helix_dbos.store.tree import TreeRun


class RunControl:
    """Answers and interrupts for the runs of one HelixDBOS's database."""

    def __init__(self, reads: SessionReads) -> None:
        self.reads = reads
        self.runtime = reads.runtime

    async def answer(self, session_id: str, tool_call_id: str, answer: Answer) -> None:
        """Check the call is pending and of this kind, then send the answer exactly once:
        the one path every answer takes (the facade, the routes, the protocols)."""
        kind = answer_kind(answer)  # InvalidAnswerError for anything but an answer
        try:
            payload = answer_payload(session_id, tool_call_id, answer)
        except InvalidAnswerError as exc:
            log_event(
                gate_event(kind, "validation_failed"),
                logging.WARNING,
                session_id=session_id,
                tool_call_id=tool_call_id,
                error=str(exc),
            )
            raise

        async def tx() -> repo.ToolCallRow:
            sent = await self._claim_and_send(session_id, tool_call_id, kind, payload)
            if sent is not None:  # the usual case: one statement
                return sent
            async with self.runtime.engine.begin() as conn:
                claimed = await claim_answer(conn, session_id, tool_call_id, kind)
                if claimed is not None:  # the usual case, one statement
                    await refuse_unserved(conn, claimed.run_id, claimed.workflow_id, self._mine)
                    await self._check_client_result(conn, claimed, payload)
                    await self._send_answer(claimed, kind, payload, conn)
                    return claimed
                row = await find_answer_target(conn, session_id, tool_call_id)
                if row is None:
                    if await repo.get_session(conn, session_id) is None:
                        raise SessionNotFoundError(session_id)
                    raise ToolCallNotFoundError(session_id, tool_call_id)
                if row.kind != kind:
                    raise InvalidAnswerError(
                        f"Tool call '{tool_call_id}' waits for {row.kind.replace('_', ' ')}; "
                        f"answer it with {request_kind(row.kind).answered_with}"
                    )
                if row.status != "pending" or row.answered_at is not None:
                    raise ToolCallAlreadyAnsweredError(
                        tool_call_id, row.status if row.status != "pending" else "answered"
                    )
                await refuse_unserved(conn, row.run_id, row.workflow_id, self._mine)
                await self._check_client_result(conn, row, payload)
                await repo.mark_answered(conn, row.run_id, tool_call_id)
                await self._send_answer(row, kind, payload, conn)
                return row

        row = await on_target_loop(tx)
        action = "submitted"
        if kind == "approval":
            action = "approved" if payload.get("approved") else "denied"
        log_event(
            gate_event(kind, action),
            session_id=session_id,
            run_id=row.run_id,
            tool_call_id=tool_call_id,
            tool_name=row.tool_name,
            error=payload.get("error"),
            reason=payload.get("reason"),
        )

    @property
    def _mine(self) -> str | None:
        return self.runtime.serves_version

    async def _claim_and_send(
        self, session_id: str, tool_call_id: str, kind: GateKind, payload: dict[str, Any]
    ) -> repo.ToolCallRow | None:
        """Claim the call and insert its answer in one statement, where that can be done:
        not for a client's result (checked against its tool's schema first), nor where
        DBOS's tables are elsewhere. None: nothing done, the transaction below decides."""
        if kind == "client" and payload.get("error") is None:
            return None
        table = message_table(self.runtime.engine)
        if table is None:
            return None
        message, serialization = dbos_internals.serialized_message(payload)
        async with self.runtime.statements() as conn:
            return await claim_and_send(
                conn,
                session_id,
                tool_call_id,
                kind,
                notifications=table,
                topic=TOPICS[kind],
                message=message,
                serialization=serialization,
                mine=self.runtime.serves_version,
            )

    async def _send_answer(
        self,
        row: repo.ToolCallRow,
        kind: GateKind,
        payload: dict[str, Any],
        conn: repo.SQLConnection,
    ) -> None:
        """Inside the claiming transaction: exactly once, under the call's key. Where
        DBOS's tables share helix's database, the message is written in that very
        transaction (`answer_send`): one commit for the claim and the answer."""
        key = f"{row.run_id}:{row.tool_call_id}"
        if await send_with_claim(
            self.runtime.engine, conn, row.workflow_id, payload, TOPICS[kind], key
        ):
            return
        await DBOS.send_async(row.workflow_id, payload, TOPICS[kind], idempotency_key=key)

    async def _check_client_result(
        self, conn: repo.SQLConnection, row: repo.ToolCallRow, payload: dict[str, Any]
    ) -> None:
        """A client tool's result must match its `output_schema`: a mismatch is refused
        here (nothing stored, the run keeps waiting for a valid result). The run checks
        again, for answers sent around this API (a raw DBOS.send, the CLI)."""
        if row.kind != "client" or payload.get("error") is not None:
            return
        run = await repo.get_run(conn, row.run_id)
        agent = self.runtime.agents.get(run.agent_name) if run is not None else None
        tool = agent.tool(row.tool_name) if agent is not None else None
        if tool is None:  # not defined in this process: the run checks it
            return
        try:
            checked_client_result(
                tool, payload.get("result"), row.session_id, row.run_id, row.tool_call_id
            )
        except ToolOutputError as exc:
            raise InvalidAnswerError(str(exc)) from exc

    async def interrupt(self, session_id: str, reason: str | None) -> list[str]:
        """Stop the live run of the session and of every session below it (sub-agents,
        companions, theirs), whether or not the session itself has one: each ends
        `interrupted`, at its next step boundary, or at once when it waits for a human,
        whose pending calls get an "Interrupted" result. Returns the run ids reached,
        the session's own first; `RunNotActiveError` when no run of the tree is live."""
        check_storable(reason=reason)
        runs = await self._live_tree(session_id)
        await self._refuse_unserved(runs)
        return await self._interrupt_runs(runs, session_id, reason)

    async def _refuse_unserved(self, runs: list[TreeRun]) -> None:
        """An interrupt is a message a run takes at its next step: refused where no live
        worker runs a run's version (abort() is the way to end such a run)."""

        async def check() -> None:
            async with self.runtime.engine.connect() as conn:
                for run in runs:
                    await refuse_unserved(conn, run.run_id, run.workflow_id, self._mine)

        await on_target_loop(check)

    async def _interrupt_runs(
        self, runs: list[TreeRun], session_id: str, reason: str | None
    ) -> list[str]:
        for run in runs:
            # Below the session: one opened but not started yet gets the interrupt from
            # its parent once started (`helix.children_started`).
            with contextlib.suppress(*_gone(run, session_id)):
                await on_target_loop(functools.partial(self._send_interrupt, run, reason))
        return [r.run_id for r in runs]

    async def _target_tree(self, session_id: str, run_id: str) -> list[TreeRun]:
        """The live tree of the session if its own live run is `run_id`, else []: a stored
        message (double texting) acts on the run that was live when it arrived, never on
        a later one."""
        runs = await self.reads.read(tree.live_runs, session_id)
        own = runs[0] if runs and runs[0].session_id == session_id else None
        return runs if own is not None and own.run_id == run_id else []

    async def interrupt_run(self, session_id: str, run_id: str, reason: str | None) -> None:
        """`interrupt()`, only if the session's live run is still `run_id`."""
        await self._interrupt_runs(await self._target_tree(session_id, run_id), session_id, reason)

    async def abort_run(self, session_id: str, run_id: str, reason: str | None) -> None:
        """`abort()`, only if the session's live run is still `run_id`."""
        await self._abort_runs(await self._target_tree(session_id, run_id), session_id, reason)

    async def _send_interrupt(self, run: TreeRun, reason: str | None) -> None:
        await DBOS.send_async(
            run.workflow_id,
            {"reason": reason},
            INTERRUPT_TOPIC,
            idempotency_key=f"{run.run_id}:interrupt",
        )
        # After that send: a run that suspends later sees it; one already waiting
        # gets a notice on each topic it waits on.
        kinds = await self.runtime.read(repo.pending_kinds, run.run_id)
        await self._notify_waits(run, kinds, reason)

    async def abort(self, session_id: str, reason: str | None) -> list[str]:
        """Cancel the live run of the session and of every session below it now: each
        workflow is cancelled (top down, so no parent sees its child end first), running
        tools are stopped (see `ToolContext.cancelled`), a wait for a human ends, and
        dangling tool calls get error results so each session continues. Returns the run
        ids reached, the session's own first; `RunNotActiveError` when none is live."""
        check_storable(reason=reason)
        runs = await self._live_tree(session_id)
        await self._abort_runs(runs, session_id, reason)
        return [r.run_id for r in runs]

    async def _abort_runs(self, runs: list[TreeRun], session_id: str, reason: str | None) -> None:
        for run in runs:
            with contextlib.suppress(*_gone(run, session_id)):
                await on_target_loop(functools.partial(DBOS.cancel_workflow_async, run.workflow_id))
        for run in runs:
            await self._close_aborted(run, reason)
        if runs:
            await on_target_loop(
                lambda: abort_remote_children(self.runtime, session_id, reason)
            )  # remote children (issue 32)

    async def _close_aborted(self, run: TreeRun, reason: str | None) -> None:
        session_id = run.session_id
        error = f"Run aborted: {reason}" if reason else "Run aborted"
        # Read before the close marks them aborted: the calls a waiting run waits on.
        pending = [
            r
            for r in await self.reads.read(repo.pending_tool_calls, session_id)
            if r.run_id == run.run_id
        ]
        waits = sorted({cast(GateKind, r.kind) for r in pending})
        closed = await on_target_loop(
            lambda: self.runtime.transaction(
                "helix.abort_run", close_run, session_id, run.run_id, error, "aborted"
            )
        )
        if not closed:  # it ended meanwhile
            return
        ids: dict[str, Any] = {"session_id": session_id, "run_id": run.run_id}
        for r in pending:
            log_event(
                gate_event(r.kind, "aborted"),
                logging.WARNING,
                tool_call_id=r.tool_call_id,
                tool_name=r.tool_name,
                reason=reason,
                cause="aborted",
                **ids,
            )
        log_event(RUN_ABORTED, logging.WARNING, reason=reason, agent_name=run.agent_name, **ids)
        await on_target_loop(lambda: emit_run_span(self.runtime, run.run_id))
        self.runtime.history.forget(session_id)
        # Wake a wait for a human so the cancelled workflow's coroutine ends now, not at
        # its deadline (the tool steps stop on the run-end notification of the close).
        await on_target_loop(lambda: self._notify_waits(run, waits, reason))

    async def _live_tree(self, session_id: str) -> list[TreeRun]:
        """The live runs of the session's tree, top down (its own first, if live)."""
        runs = await self.reads.read(tree.live_runs, session_id)
        if not runs:
            await self.reads.get_session(session_id)  # SessionNotFoundError first
            raise RunNotActiveError(
                f"Session '{session_id}' has no run in progress, nor has any session below it"
            )
        return runs

    async def _notify_waits(self, run: TreeRun, kinds: list[GateKind], reason: str | None) -> None:
        for kind in kinds:
            await DBOS.send_async(
                run.workflow_id,
                {"interrupt": True, "reason": reason},
                TOPICS[kind],
                idempotency_key=f"{run.run_id}:interrupt:{kind}",
            )


def _gone(run: TreeRun, session_id: str) -> tuple[type[Exception], ...]:
    """What acting on a run below the session may meet: its workflow not started yet."""
    if run.session_id == session_id:
        return ()
    return (dbos_internals.DBOSNonExistentWorkflowError,)
