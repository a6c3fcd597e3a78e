"""Sub-agents as DBOS child workflows of the parent's run (seed 002).

Seed 002: "The child runs to completion and returns the result as a tool result.
Child sessions are isolated but stream events flow to the parent's stream. Each
sub-agent gets its own sessionId." One step's sub-agent calls go, from the parent's
workflow code (DBOS cannot start a workflow from inside a step), through:

1. `helix.open_children`, one transaction: each child's session (`parent_session_id`,
   `root_session_id`), run and input, and the parent run `waiting` on
   `awaiting_children`. A child that cannot be dispatched (its agent is not registered
   in this process) gets the reason instead; it is checkpointed, so a replay decides
   the same. An interrupt already sent to the parent (while its LLM step ran, say)
   opens no child at all: the calls get "Interrupted" and the run ends interrupted;
2. each child's workflow starts under an id derived from the parent run, the step and
   the call id: a replay finds the child it started and never starts a second one;
   then `helix.children_started` hands each child an interrupt that reached the parent
   meanwhile (after `open_children` looked, before its children could be found);
3. one `helix.subagent:<name>` step per child, all at once beside the step's plain
   tools, waits for the child's run to end (on its run-end notification) and returns
   its output or error, with its tokens and duration for the parent's `subagent`
   usage row; a recovered parent waits again for the same children;
4. `helix.children_done` marks the parent running again.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass

from dbos import DBOS, StepOptions

from helix_dbos.definitions.agent import Agent
from helix_dbos.definitions.hooks import (
    HookContext,
    MessageEvent,
    RunEvent,
    ToolEvent,
    fire_safely,
)
from helix_dbos.definitions.subagent import SubAgentTool
from helix_dbos.errors import ToolArgumentsError
from helix_dbos.log_events import SUBAGENT_DISPATCH_FAILED, log_event
from helix_dbos.orchestration.messages import create_tool_result_message, to_json_text
from helix_dbos.orchestration.types import ToolCall
from helix_dbos.runtime.children.step_children import StepChildren, show_calls_started
from helix_dbos.runtime.process.process_runtime import (
    Runtime,
    current_runtime,
    is_transient_db_error,
)
from helix_dbos.runtime.sessions.run_opening import OpenRunRequest, child_ids, open_run, workflow_id
from helix_dbos.runtime.steps.commit import StepCommit, write_head
from helix_dbos.runtime.steps.results import TERMINAL_STATUSES
from helix_dbos.runtime.steps.step_types import ChunkRecord, ToolOutcome
from helix_dbos.runtime.steps.tool_step import outside_result_hooks
from helix_dbos.runtime.steps.workflow_start import Fresh
from helix_dbos.runtime.waits.hitl import (
    INTERRUPT_TOPIC,
    TOPICS,
    InterruptNotice,
    interrupted_message,
)
from helix_dbos.store import repository as repo
from helix_dbos.store.repository import RunRow
from helix_dbos.streaming.notifier import run_end_key

# `helix.agent_run` itself, handed in by the agent loop (which imports this module).
AWAITING_CHILDREN = "awaiting_children"
# How often a waiting parent re-reads its child's run when no notification came.
CHILD_POLL_SECONDS = 5.0


@dataclass(frozen=True)
class ChildRun:
    """One sub-agent call's child: ids derived from the parent run, step and call."""

    call_id: str
    tool_name: str
    agent_name: str
    session_id: str
    run_id: str
    workflow_id: str
    input: str

    @classmethod
    def of(cls, parent: StepCommit, call: ToolCall, agent_name: str, text: str) -> ChildRun:
        session_id, run_id = child_ids(parent.run_id, parent.step, call.id)
        return cls(call.id, call.name, agent_name, session_id, run_id, workflow_id(run_id), text)


def child_step_options(child: ChildRun) -> StepOptions:
    return {
        "name": f"helix.subagent:{child.agent_name}",
        "retries_allowed": True,
        "max_attempts": 6,
        "interval_seconds": 0.5,
        "backoff_rate": 2.0,
        "should_retry": is_transient_db_error,
    }


@dataclass(frozen=True)
class ParentCall:
    """The parent's sub-agent call, for its tool hooks."""

    session_id: str
    run_id: str
    agent_name: str
    step: int
    call: ToolCall

    def hook_context(self) -> HookContext:
        return HookContext(self.session_id, self.run_id, self.agent_name, self.step)


class SubAgentDispatch(StepChildren):
    """One step's sub-agent calls: open and start the children, then settle the parent."""

    # An interrupt that came before the children could start: the batch ends with it.
    interrupt: InterruptNotice | None = None

    @functools.cached_property
    def _calls(self) -> dict[str, ToolCall]:
        """The sub-agent calls, by id."""
        return {}

    def is_sub_agent(self, call: ToolCall) -> bool:
        return isinstance(self.agent.tool(call.name), SubAgentTool)

    async def dispatch(
        self, calls: list[ToolCall], outcomes: dict[str, ToolOutcome]
    ) -> list[ChildRun]:
        """Open and start a child per call; a call that cannot run gets its outcome now.
        Each call fires before_tool first, and a call that gets no child its on_message
        and after_tool here (a started child's fire when its result comes back)."""
        if not calls:
            return []
        await self._before_tool(calls)
        started = await self._dispatch(calls, outcomes)
        unstarted = [c for c in calls if c.id in outcomes]
        if unstarted and (self.agent.hooks.after_tool or self.agent.hooks.on_message):
            await DBOS.run_step_async(
                {"name": "helix.subagent_hooks"},
                unstarted_hooks,
                self.parent_call(unstarted[0]),
                unstarted,
                {c.id: outcomes[c.id] for c in unstarted},
            )
        return started

    def parent_call(self, call: ToolCall | ChildRun) -> ParentCall:
        """The parent's tool call a child answers (for its hooks)."""
        call_id = call.id if isinstance(call, ToolCall) else call.call_id
        c = self.commit
        return ParentCall(c.session_id, c.run_id, self.agent.name, c.step, self._calls[call_id])

    async def _before_tool(self, calls: list[ToolCall]) -> None:
        """before_tool for each call, in call order, in one step (so once, replay or not)."""
        self._calls.update({c.id: c for c in calls})
        if self.agent.hooks.before_tool is not None:
            await DBOS.run_step_async(
                {"name": "helix.hook:before_tool"},
                before_tool_hooks,
                self.parent_call(calls[0]),
                calls,
            )

    async def _dispatch(
        self, calls: list[ToolCall], outcomes: dict[str, ToolOutcome]
    ) -> list[ChildRun]:
        children: list[ChildRun] = []
        dispatched: list[ToolCall] = []
        for call in calls:
            tool = self.agent.tool(call.name)
            assert isinstance(tool, SubAgentTool)
            try:
                arguments = tool.validate_arguments(call.arguments)
            except ToolArgumentsError as exc:  # the model's mistake: an argument error
                outcomes[call.id] = ToolOutcome.not_executed(str(exc))
                continue
            dispatched.append(call)
            children.append(
                ChildRun.of(self.commit, call, tool.agent_name, tool.child_input(arguments))
            )
        if not children:
            return []
        workflow_id = DBOS.workflow_id
        assert workflow_id is not None
        opening = Fresh()  # its failures are logged only when it decides them now
        try:
            failures = await self.rt.transaction(
                "helix.open_children",
                open_children,
                self.commit,
                children,
                dispatched,
                workflow_id,
                opening,
                self.tenant,
                self.hands_down_limits,
            )
        except Exception as exc:
            failures = {c.call_id: f"its session could not be opened: {exc}" for c in children}
        if failures is None:  # the parent was interrupted first: no child starts
            await self._take_interrupt(children, outcomes)
            return []
        started: list[ChildRun] = []
        for child in children:
            if child.call_id in failures:
                reason = failures[child.call_id]
                outcomes[child.call_id] = self._dispatch_failed(child, reason, log=opening.ran)
                continue
            failed = await self.start(child)
            if failed is not None:
                outcomes[child.call_id] = self._dispatch_failed(
                    child, failed.reason, log=failed.closed_now
                )
                continue
            started.append(child)
        if started:
            await self._fire("on_agent_suspended", "waiting", started)
            await DBOS.run_step_async(
                {"name": "helix.children_started"}, forward_interrupt, workflow_id, started
            )
        return started

    async def _take_interrupt(
        self, children: list[ChildRun], outcomes: dict[str, ToolOutcome]
    ) -> None:
        """Take the parent's pending interrupt (as a wait for a human does): its sub-agent
        calls are not executed, and the batch ends the run `interrupted`."""
        message = await DBOS.recv_async(INTERRUPT_TOPIC, timeout_seconds=0)
        reason = message.get("reason") if isinstance(message, dict) else None
        self.interrupt = InterruptNotice(interrupt=True, reason=reason)
        for child in children:
            outcomes[child.call_id] = ToolOutcome.not_executed(interrupted_message(reason))

    async def settle(self, started: list[ChildRun]) -> None:
        """Every child has ended: the parent works again."""
        if not started:
            return
        await self.rt.transaction("helix.children_done", children_done, self.commit)
        await self._fire("on_agent_resumed", "running", started)

    def _dispatch_failed(self, child: ChildRun, reason: str, *, log: bool) -> ToolOutcome:
        return dispatch_failed(
            self.commit, child.call_id, child.tool_name, child.agent_name, reason, log=log
        )

    async def _fire(self, hook_name: str, status: str, children: list[ChildRun]) -> None:
        sessions, call_ids = [c.session_id for c in children], [c.call_id for c in children]
        await fire_children_hook(self.agent, self.commit, hook_name, status, sessions, call_ids)


def dispatch_failed(
    commit: StepCommit,
    call_id: str,
    tool_name: str,
    child_agent_name: str,
    reason: str,
    *,
    log: bool,
) -> ToolOutcome:
    """Seed 002: a dispatch failure reaches the model as a tool error, with an error
    chunk and an ERROR log event; siblings are unaffected (ephemeral sub-agents and
    companions alike). `log`: the step that found the failure ran now, not replayed from
    its checkpoint by a recovery (which would log it a second time)."""
    error = f"Sub-agent '{child_agent_name}' could not be dispatched: {reason}"
    if log:
        log_event(
            SUBAGENT_DISPATCH_FAILED,
            logging.ERROR,
            error,
            run_id=commit.run_id,
            session_id=commit.session_id,
            agent_name=commit.agent_name,
            step=commit.step,
            tool_call_id=call_id,
            child_agent_name=child_agent_name,
        )
    payload = {"error": error, "tool_call_id": call_id, "tool_name": tool_name}
    key = f"{commit.run_id}:{commit.step}:{call_id}:dispatch_failed"
    commit.events.append(ChunkRecord(key, "error", payload))
    return ToolOutcome(
        success=False, content=None, error=error, duration_ms=0.0, usage_kind="subagent"
    )


async def fire_children_hook(
    agent: Agent,
    commit: StepCommit,
    hook_name: str,
    status: str,
    sessions: list[str],
    call_ids: list[str],
) -> None:
    """on_agent_suspended (reason `awaiting_children`) or on_agent_resumed, in a step."""
    hook = getattr(agent.hooks, hook_name)
    if hook is None:
        return
    context = HookContext(commit.session_id, commit.run_id, agent.name, commit.step)
    details = {
        "reason": AWAITING_CHILDREN if status == "waiting" else "children_done",
        "children": sessions,
        "tool_call_ids": call_ids,
    }
    await DBOS.run_step_async(
        {"name": f"helix.hook:{hook_name}"},
        fire_safely,
        hook,
        RunEvent(context, status, details=details),
    )


async def open_children(
    session: repo.SQLConnection,
    parent: StepCommit,
    children: list[ChildRun],
    calls: list[ToolCall],
    workflow_id: str,
    fresh: Fresh | None = None,
    tenant: str | None = None,
    head_first: bool = False,
) -> dict[str, str] | None:
    """The body of `helix.open_children`; returns why each undispatchable child was not
    opened, by call id, or None, opening nothing, when an interrupt for the parent's
    workflow is pending. The parent's stream shows each call start first (the same keyed
    `tool_start` its step writes later), then each child's own chunks.

    Locks are taken in the order every other writer takes them (the parent's run row,
    its session row, then a child's session row and its root's): the parent's live head
    write runs at the same time and locks its run, then its session. `head_first`: the
    children check usage limits handed down from this run's tree, so the parent's model
    call that asked for them is recorded before they can start (`write_head`, keyed)."""
    if fresh is not None:
        fresh.ran = True
    if await repo.interrupt_pending(session, workflow_id):
        return None
    agents = current_runtime().agents
    failures = {
        c.call_id: (
            f"agent '{c.agent_name}' is not registered in this process "
            "(register sub-agents with HelixDBOS like any agent)"
        )
        for c in children
        if c.agent_name not in agents
    }
    opening = [c for c in children if c.call_id not in failures]
    if opening and head_first:
        await write_head(session, parent)
    if opening:
        await children_waiting(session, parent)
    await show_calls_started(session, parent, calls)
    root = await repo.session_root(session, parent.session_id)
    for child in opening:
        await _open_child(session, parent, child, agents[child.agent_name], root, tenant)
    return failures


async def _open_child(
    session: repo.SQLConnection,
    parent: StepCommit,
    child: ChildRun,
    agent: Agent,
    root: str,
    tenant: str | None,
) -> None:
    """The child's session, run, input and `run_started` chunk."""
    request = OpenRunRequest.child(
        agent,
        session_id=child.session_id,
        run_id=child.run_id,
        text=child.input,
        parent_session_id=parent.session_id,
        parent_run_id=parent.run_id,
        root_session_id=root,
        call_id=child.call_id,
        tenant=tenant,
    )
    await open_run(session, request)


async def forward_interrupt(parent_workflow_id: str, children: list[ChildRun]) -> bool:
    """The body of `helix.children_started`: an interrupt sent to the parent after
    `open_children` looked (`interrupt()` reaches only children it can find started) is
    handed to each child, as `interrupt()` would; keyed, so a repeat sends nothing twice.
    Returns whether there was one."""
    rt = current_runtime()
    if not await rt.read(repo.interrupt_pending, parent_workflow_id):
        return False
    reason = "its parent was interrupted"
    for child in children:
        await DBOS.send_async(
            child.workflow_id,
            {"reason": reason},
            INTERRUPT_TOPIC,
            idempotency_key=f"{child.run_id}:interrupt",
        )
        for kind in await rt.read(repo.pending_kinds, child.run_id):
            await DBOS.send_async(
                child.workflow_id,
                {"interrupt": True, "reason": reason},
                TOPICS[kind],
                idempotency_key=f"{child.run_id}:interrupt:{kind}",
            )
    return True


async def before_tool_hooks(parent: ParentCall, calls: list[ToolCall]) -> None:
    """The body of `helix.hook:before_tool`: before_tool for each sub-agent call."""
    hook = current_runtime().agent(parent.agent_name).hooks.before_tool
    for call in calls:
        await fire_safely(hook, ToolEvent(parent.hook_context(), call))


async def unstarted_hooks(
    parent: ParentCall, calls: list[ToolCall], outcomes: dict[str, ToolOutcome]
) -> None:
    """The body of `helix.subagent_hooks`: on_message and after_tool for sub-agent calls
    that got no child (bad arguments, a dispatch failure, an interrupt). A call that did
    not run at all (`duration_ms` None) has its on_message when its message is written."""
    hooks = current_runtime().agent(parent.agent_name).hooks
    context = parent.hook_context()
    for call in calls:
        outcome = outcomes[call.id]
        if outcome.duration_ms is not None:
            message = create_tool_result_message(
                call.id, call.name, success=False, error=outcome.error
            )
            await fire_safely(hooks.on_message, MessageEvent(context, message))
        event = ToolEvent(
            context, call, success=False, error=outcome.error, duration_ms=outcome.duration_ms
        )
        await fire_safely(hooks.after_tool, event)


async def children_waiting(session: repo.SQLConnection, parent: StepCommit) -> None:
    """The body of `helix.children_waiting`: a parent still live waits on a child it
    cannot go on without (a blocking companion's turn)."""
    if await repo.update_live_run(
        session,
        parent.run_id,
        status="waiting",
        waiting_for=AWAITING_CHILDREN,
        waiting_since_now=True,
    ):
        await repo.update_session(session, parent.session_id, status="waiting")


async def children_done(session: repo.SQLConnection, parent: StepCommit) -> None:
    """The body of `helix.children_done`: a parent still live works again."""
    if await repo.update_live_run(
        session, parent.run_id, status="running", waiting_for=None, waiting_since=None
    ):
        await repo.update_session(session, parent.session_id, status="running")


async def child_result(child: ChildRun, parent: ParentCall | None = None) -> ToolOutcome:
    """The body of a `helix.subagent:<name>` step: the child's run, once it ended, as
    the call's outcome (its output, or why it did not complete). For a sub-agent call
    (`parent`), the parent's on_message and after_tool fire here, once the result is in,
    before its siblings' results (seed 002: DBOS fires hooks "before the enclosing
    Promise.all-driven sub-agent dispatch resolves")."""
    rt = current_runtime()
    run = await run_end(rt, child.run_id)
    tokens, duration_ms = await rt.read(repo.run_usage_total, child.run_id)
    if run.status == "completed":
        outcome = ToolOutcome(
            success=True,
            content=to_json_text(run.output),
            result=run.output,
            duration_ms=duration_ms,
            usage_kind="subagent",
            tokens=tokens,
        )
    else:
        why = f": {run.error}" if run.error else ""
        outcome = ToolOutcome(
            success=False,
            content=None,
            error=f"Sub-agent '{child.agent_name}' {run.status}{why}",
            duration_ms=duration_ms,
            usage_kind="subagent",
            tokens=tokens,
        )
    if parent is not None:
        await outside_result_hooks(
            parent.session_id, parent.run_id, parent.agent_name, parent.step, parent.call, outcome
        )
    return outcome


async def run_end(rt: Runtime, run_id: str) -> RunRow:
    """Wait for a run's final status, sleeping on its run-end notification."""
    notifier = await rt.notifier() if rt.notifier is not None else None
    key = run_end_key(run_id)
    while True:
        seen = notifier.version(key) if notifier is not None else 0
        run = await rt.read(repo.get_run, run_id)
        if run is None:
            raise RuntimeError(f"the sub-agent run {run_id} does not exist")
        if run.status in TERMINAL_STATUSES:
            return run
        if notifier is None:
            await asyncio.sleep(0.5)
        else:
            await notifier.wait(key, seen, CHILD_POLL_SECONDS)
