"""Persistent sub-agents (seed 002's companions), driven from the parent's workflow code.

"Each persistent child gets a stable session ID: {parentSessionId}-agent-{name}.
Children can be named explicitly or auto-named ({agentType}-{counter})." A companion
call runs in the parent's workflow code, one by one after the step's other tools
("Companion tools have their own phase"): every decision comes from a checkpointed
transaction, and each child turn is a child workflow under an id derived from the
parent run, the step and the call, so a replay starts nothing twice.

- spawnAgent opens a turn in the child's session (a new one, or the same child again:
  it keeps its memory, seed 000's continuation) and starts it;
- sendMessage interrupts a running child, waits for it to stop, and opens a turn with
  the message; a finished child simply gets a new turn;
- a blocking child's answer is the call's result (a `subagent` usage row, as for an
  ephemeral sub-agent); a non-blocking one works on, and its completion is appended to
  the parent's transcript before the parent's next model call (`companion_notices`);
- listChildren / getChildStatus read SQL; terminateChild cancels the child's workflow and
  closes its run; waitForResult waits for the child's current turn, up to a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

from dbos import DBOS
from pydantic import BaseModel

from helix_dbos.definitions.agent import Agent
from helix_dbos.definitions.companions import CompanionTool
from helix_dbos.errors import ToolArgumentsError
from helix_dbos.orchestration.messages import to_json_text
from helix_dbos.orchestration.types import Message, ToolCall
from helix_dbos.runtime.children.step_children import StepChildren, show_calls_started
from helix_dbos.runtime.children.subagents import (
    ChildRun,
    child_result,
    child_step_options,
    children_done,
    children_waiting,
    dispatch_failed,
    fire_children_hook,
    run_end,
)
from helix_dbos.runtime.process.process_runtime import Runtime, current_runtime
from helix_dbos.runtime.sessions.run_opening import AlreadyRunning, OpenRunRequest, open_run
from helix_dbos.runtime.steps.closing import close_run
from helix_dbos.runtime.steps.commit import StepCommit, write_head
from helix_dbos.runtime.steps.results import TERMINAL_STATUSES
from helix_dbos.runtime.steps.step_types import ToolOutcome
from helix_dbos.runtime.steps.workflow_start import Fresh
from helix_dbos.runtime.waits.hitl import INTERRUPT_TOPIC, TOPICS
from helix_dbos.store import repository as repo
from helix_dbos.store.features import companion_rows as sql


@dataclass(frozen=True)
class Busy:
    """A child's live run that a follow-up message must interrupt first."""

    run_id: str
    workflow_id: str
    waits: tuple[str, ...]  # the kinds of human answers it waits for


@dataclass(frozen=True)
class Opened:
    """What `helix.companion_open` decided: a turn opened, a child busy, or an error."""

    child: ChildRun | None = None
    name: str | None = None
    mode: str = "blocking"
    busy: Busy | None = None
    error: str | None = None
    # The child cannot be dispatched (its agent is not registered in this process): as
    # for an ephemeral sub-agent, a tool error with an error chunk and an ERROR event.
    dispatch_error: str | None = None
    agent_name: str | None = None


class CompanionCalls(StepChildren):
    """Runs one step's companion calls in the parent's workflow code."""

    def is_companion(self, call: ToolCall) -> bool:
        return isinstance(self.agent.tool(call.name), CompanionTool)

    async def run(self, call: ToolCall) -> ToolOutcome:
        tool = self.agent.tool(call.name)
        assert isinstance(tool, CompanionTool)
        try:
            args = tool.validate_arguments(call.arguments)
        except ToolArgumentsError as exc:
            return ToolOutcome.not_executed(str(exc))
        if tool.action in ("spawnAgent", "sendMessage"):
            return await self._turn(call, args, spawn=tool.action == "spawnAgent")
        if tool.action == "terminateChild":
            return await self._terminate(call, args)
        if tool.action == "waitForResult":
            return await self._wait(call, args)
        status = await self.rt.transaction(
            "helix.companion_read", sql.children_status, self.commit.session_id, _name(args)
        )
        if isinstance(status, str):
            return _error(status)
        return _result(status)

    async def _turn(self, call: ToolCall, args: BaseModel, *, spawn: bool) -> ToolOutcome:
        """Open a turn in the child's session (interrupting a busy child first) and
        start it; a blocking child's answer is the result."""
        opening = Fresh()  # a dispatch failure is logged only when decided now
        opened = await self._open(call, args, spawn=spawn, fresh=opening)
        if opened.busy is not None and not spawn:
            await self._interrupt(opened.busy, "a new message from the parent")
            await DBOS.run_step_async(
                {"name": "helix.companion_stopped"}, run_end_status, opened.busy.run_id
            )
            opening = Fresh()
            opened = await self._open(call, args, spawn=False, fresh=opening)
        if opened.dispatch_error is not None:
            return dispatch_failed(
                self.commit,
                call.id,
                call.name,
                opened.agent_name or "",
                opened.dispatch_error,
                log=opening.ran,
            )
        if opened.error is not None or opened.child is None:
            return _error(opened.error or "the child is still running")
        child = opened.child
        failed = await self.start(child)
        if failed is not None:  # its turn is closed, so nothing waits on it
            fail = failed.reason
            return dispatch_failed(
                self.commit, call.id, call.name, child.agent_name, fail, log=failed.closed_now
            )
        if opened.mode == "blocking":
            await self._waiting([child.session_id], call.id)
            outcome = await DBOS.run_step_async(child_step_options(child), child_result, child)
            await self._resumed([child.session_id], call.id)
            return outcome
        return _result(
            {
                "name": opened.name,
                "session_id": child.session_id,
                "status": "running",
            }
        )

    async def _open(self, call: ToolCall, args: BaseModel, *, spawn: bool, fresh: Fresh) -> Opened:
        return await self.rt.transaction(
            "helix.companion_open",
            open_companion_turn,
            self.commit,
            call,
            getattr(args, "agentType", None),
            _name(args),
            str(getattr(args, "message", "")),
            spawn,
            fresh,
            self.tenant,
            self.hands_down_limits,
        )

    async def _interrupt(self, busy: Busy, reason: str) -> None:
        """As `HelixDBOS.interrupt`: the interrupt, then a notice on each topic it waits on."""
        await DBOS.send_async(
            busy.workflow_id,
            {"reason": reason},
            INTERRUPT_TOPIC,
            idempotency_key=f"{busy.run_id}:interrupt",
        )
        for kind in busy.waits:
            await DBOS.send_async(
                busy.workflow_id,
                {"interrupt": True, "reason": reason},
                TOPICS[kind],  # type: ignore[index]
                idempotency_key=f"{busy.run_id}:interrupt:{kind}",
            )

    async def _terminate(self, call: ToolCall, args: BaseModel) -> ToolOutcome:
        busy = await self.rt.transaction(
            "helix.companion_live", sql.live_child, self.commit.session_id, _name(args)
        )
        if isinstance(busy, str):
            return _error(busy)
        reason = getattr(args, "reason", None)
        error = f"Terminated by its parent: {reason}" if reason else "Terminated by its parent"
        await DBOS.cancel_workflow_async(busy.workflow_id)
        await self.rt.transaction(
            "helix.companion_close", close_run, busy.session_id, busy.run_id, error, "aborted"
        )
        await self._interrupt(Busy(busy.run_id, busy.workflow_id, busy.waits), error)
        return _result({"name": _name(args), "status": "aborted"})

    async def _wait(self, call: ToolCall, args: BaseModel) -> ToolOutcome:
        live = await self.rt.transaction(
            "helix.companion_live", sql.live_child, self.commit.session_id, _name(args)
        )
        waiting = [live.session_id] if not isinstance(live, str) else []
        if waiting:  # a child still working: the parent visibly waits on it
            await self._waiting(waiting, call.id)
        timeout = float(getattr(args, "timeoutSeconds", 300.0))
        status = await DBOS.run_step_async(
            {"name": "helix.companion_wait"},
            wait_for_child,
            self.commit.session_id,
            _name(args),
            timeout,
        )
        if waiting:
            await self._resumed(waiting, call.id)
        if isinstance(status, str):
            return _error(status)
        return _result(status)

    async def _waiting(self, sessions: list[str], call_id: str) -> None:
        """A blocking call waits on a child: the parent's run is `waiting` on
        `awaiting_children`, as for ephemeral sub-agents, and on_agent_suspended fires."""
        await self.rt.transaction("helix.children_waiting", children_waiting, self.commit)
        await fire_children_hook(
            self.agent, self.commit, "on_agent_suspended", "waiting", sessions, [call_id]
        )

    async def _resumed(self, sessions: list[str], call_id: str) -> None:
        await self.rt.transaction("helix.children_done", children_done, self.commit)
        await fire_children_hook(
            self.agent, self.commit, "on_agent_resumed", "running", sessions, [call_id]
        )


def _name(args: BaseModel) -> str | None:
    name = getattr(args, "name", None)
    return str(name) if name is not None else None


def _result(value: Any) -> ToolOutcome:
    return ToolOutcome.executed(result=value, error=None, state=None, events=[], duration_ms=0.0)


def _error(error: str) -> ToolOutcome:
    return ToolOutcome.executed(result=None, error=error, state=None, events=[], duration_ms=0.0)


async def open_companion_turn(
    session: repo.SQLConnection,
    parent: StepCommit,
    call: ToolCall,
    agent_type: str | None,
    name: str | None,
    message: str,
    spawn: bool,
    fresh: Fresh | None = None,
    tenant: str | None = None,
    head_first: bool = False,
) -> Opened:
    """The body of `helix.companion_open`: find or create the named child, refuse or
    report a busy one, else open a turn with `message` in its session. The parent's
    stream shows the call's start first (the keyed `tool_start` its step writes later).
    `head_first`: the turn checks usage limits handed down from the parent's tree, so
    the parent's model call that asked for it is recorded first (`write_head`, keyed)."""
    if fresh is not None:
        fresh.ran = True
    if head_first:  # the parent's run row first, as every writer locks it
        await write_head(session, parent)
    call_id = call.id
    await show_calls_started(session, parent, [call])
    rt = current_runtime()
    persistent = rt.agent(parent.agent_name).persistent_agent(agent_type or "")
    agent = rt.agents.get(agent_type or "")
    if spawn and (persistent is None or agent is None):
        return _unregistered(agent_type or "")
    ref = await sql.find_or_create(
        session,
        parent.session_id,
        agent_type if spawn else None,
        name,
        mode=persistent.mode if persistent is not None else "blocking",
        state=agent.initial_state(None) if agent is not None else {},
        create=spawn,
    )
    if isinstance(ref, str):
        return Opened(error=ref)
    agent = rt.agents.get(ref.agent_name)
    if agent is None:
        return _unregistered(ref.agent_name)
    request = OpenRunRequest.companion_turn(
        agent,
        session_id=ref.session_id,
        text=message,
        parent_run_id=parent.run_id,
        step=parent.step,
        call_id=call_id,
        tenant=tenant,
    )
    opened = await open_run(session, request)
    if isinstance(opened, AlreadyRunning):
        if spawn:
            return Opened(
                error=f"Child '{ref.name}' is already running; send it a message with "
                "companion__sendMessage"
            )
        waits = tuple(await repo.pending_kinds(session, opened.run_id))
        busy = Busy(opened.run_id, opened.workflow_id, waits)
        return Opened(busy=busy, name=ref.name, mode=ref.mode)
    child = ChildRun(
        call_id,
        f"companion:{ref.name}",
        ref.agent_name,
        ref.session_id,
        opened.run_id,
        opened.workflow_id,
        message,
    )
    return Opened(child=child, name=ref.name, mode=ref.mode)


def _unregistered(agent_name: str) -> Opened:
    return Opened(
        dispatch_error=f"agent '{agent_name}' is not registered in this process "
        "(register sub-agents with HelixDBOS like any agent)",
        agent_name=agent_name,
    )


STOPPED_WITH_PARENT = "Stopped: its parent's run ended"


async def stop_with_parent(rt: Runtime, agent: Agent, session_id: str, run_id: str) -> None:
    """The parent's run has ended: the turns it opened in its children with
    `on_parent_end="stop"` that still run are aborted, as `companion__terminateChild` would (workflow code: each
    decision and effect is a step, so a recovery repeats none)."""
    names = [p.agent.name for p in agent.persistent_agents if p.on_parent_end == "stop"]
    if not names:
        return
    live = await rt.transaction(
        "helix.companions_live", sql.live_children, session_id, run_id, names
    )
    for child in live:
        await DBOS.cancel_workflow_async(child.workflow_id)
        await rt.transaction(
            "helix.companion_close",
            close_run,
            child.session_id,
            child.run_id,
            STOPPED_WITH_PARENT,
            "aborted",
        )
        for kind in child.waits:  # wake its wait for a human, so its coroutine ends now
            await DBOS.send_async(
                child.workflow_id,
                {"interrupt": True, "reason": STOPPED_WITH_PARENT},
                TOPICS[kind],  # type: ignore[index]
                idempotency_key=f"{child.run_id}:interrupt:{kind}",
            )


async def run_end_status(run_id: str) -> str:
    """The body of `helix.companion_stopped`: a run's final status, once it has one."""
    return (await run_end(current_runtime(), run_id)).status


async def wait_for_child(
    parent_session_id: str, name: str | None, timeout: float
) -> dict[str, Any] | list[dict[str, Any]] | str:
    """The body of `helix.companion_wait`: the child's current turn, once it ended (or
    its status at the timeout)."""
    rt = current_runtime()
    async with rt.engine.connect() as conn:
        ref = await sql.find(conn, parent_session_id, name)
    if ref is None:
        return f"No child named '{name}'"
    async with rt.engine.connect() as conn:
        latest = await sql.latest_run(conn, ref.session_id)
    if latest is not None and latest.status not in TERMINAL_STATUSES:
        with contextlib.suppress(asyncio.TimeoutError):  # then report it still running
            await asyncio.wait_for(run_end(rt, latest.run_id), timeout)
    async with rt.engine.connect() as conn:
        status = await sql.children_status(conn, parent_session_id, name)
    return status


async def companion_notices(
    session: repo.SQLConnection, parent_session_id: str, run_id: str
) -> int:
    """The body of `helix.companion_notices`: each non-blocking child whose turn ended
    since the parent last heard is announced once, as a user message in the parent's
    transcript; returns how many."""
    ended = await sql.unannounced_ends(session, parent_session_id)
    if not ended:
        return 0
    messages = [Message(role="user", content=_notice(e)) for e in ended]
    await repo.append_messages(session, parent_session_id, run_id, messages)
    return len(messages)


def _notice(ended: sql.ChildEnd) -> str:
    what = (
        f"completed with: {to_json_text(ended.output)}"
        if ended.status == "completed"
        else f"ended {ended.status}" + (f": {ended.error}" if ended.error else "")
    )
    return f"[companion '{ended.name}' ({ended.agent_name}) {what}]"
