"""The one DBOS workflow that runs every agent.

Per agent step: one LLM step and one step per tool call (parallel calls run
concurrently at step ids reserved in call order). The step's messages, state,
usage and chunks are written exactly once, by a keyed statement that the next
LLM step waits for before it reads the transcript; the last step is written with
the run's final status by the `helix.commit_final` step (see `runtime/commit.py`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from dbos import DBOS
from pydantic_core import to_jsonable_python

from helix_dbos.definitions.agent import Agent
from helix_dbos.definitions.context import ToolContext
from helix_dbos.definitions.hooks import HookContext, RunEvent
from helix_dbos.errors import ToolArgumentsError
from helix_dbos.llm.base import step_result_adapter
from helix_dbos.orchestration.completion import (
    MAX_NUDGES_ERROR,
    MAX_STEPS_ERROR,
    completion_nudge,
    max_tokens_correction,
)
from helix_dbos.orchestration.messages import (
    create_assistant_message,
    create_tool_result_message,
    synthesize_finish_tool_result,
    to_json_text,
)
from helix_dbos.orchestration.planning import StepProcessingPlan, plan_step_processing
from helix_dbos.orchestration.terminating import (
    MAX_INVOCATIONS_ERROR,
    response_text,
    truncate_at_terminating,
)
from helix_dbos.orchestration.types import (
    FINISH_TOOL_NAME,
    LLMUsage,
    Message,
    ToolCall,
    ToolCallsStepResult,
)
from helix_dbos.runtime.commit import StepCommit, WriteAhead, commit_final
from helix_dbos.runtime.context import Runtime, current_runtime, is_transient_db_error, logger
from helix_dbos.runtime.hitl import (
    HumanWait,
    client_outcome_step,
    denial_message,
    evaluate_gates,
    needs_gate_step,
    timeout_message,
)
from helix_dbos.runtime.steps import (
    is_retryable_llm_error,
    llm_step,
    run_terminating,
    runs_at_once,
    tool_start_chunk,
    tool_step,
)
from helix_dbos.store.repository import PendingToolCall, UsageRecord

WORKFLOW_NAME = "helix.agent_run"
LLM_STEP_OPTIONS = {
    "name": "helix.llm",
    "retries_allowed": True,
    "max_attempts": 6,
    "interval_seconds": 1.0,
    "backoff_rate": 2.0,
    "should_retry": is_retryable_llm_error,
}
FINAL_STEP_OPTIONS = {
    "name": "helix.commit_final",
    "retries_allowed": True,
    "max_attempts": 6,
    "interval_seconds": 0.5,
    "backoff_rate": 2.0,
    "should_retry": is_transient_db_error,
}


INTERRUPT_TOPIC = "helix.interrupt"


class AgentLoop:
    def __init__(
        self,
        rt: Runtime,
        run_id: str,
        session_id: str,
        agent: Agent,
        options: dict[str, Any] | None = None,
    ) -> None:
        self.rt = rt
        self.run_id = run_id
        self.session_id = session_id
        self.agent = agent
        self.options = options or {}
        self.terminating = run_terminating(agent, self.options)
        self.mode = agent.completion_for(self.terminating)
        self.max_steps = self.terminating.max_invocations if self.terminating else agent.max_steps
        self._outcomes: dict[str, dict[str, Any]] = {}
        self.steps_taken = 0
        self.nudges = 0
        self.output_retries = 0
        self.max_tokens_fixes = 0
        self._pending: StepCommit | None = None  # written by the next LLM step
        self._ahead: WriteAhead | None = None

    async def run(self) -> dict[str, Any]:
        step = 0
        while True:
            step += 1
            self.steps_taken = step - 1
            if step > self.max_steps:
                error = (
                    MAX_INVOCATIONS_ERROR
                    if self.terminating
                    else MAX_STEPS_ERROR.format(max_steps=self.max_steps)
                )
                return await self._finish_without_step(step - 1, "failed", error=error)
            previous: WriteAhead | None = None
            if self._pending is not None:
                # Started now, it overlaps DBOS's own bookkeeping for the LLM step.
                previous = self._ahead = WriteAhead(self._pending, DBOS.workflow_id, self._ahead)
            try:
                llm = await DBOS.run_step_async(
                    LLM_STEP_OPTIONS,
                    llm_step,
                    self.session_id,
                    self.agent.name,
                    self.run_id,
                    step,  # type: ignore[arg-type]
                    self.options,
                    previous,
                )
            except Exception as exc:
                return await self._finish_without_step(
                    step, "failed", error=f"LLM call failed after retries: {exc}"
                )
            self._pending = None  # the LLM step wrote it before reading the transcript
            if llm.get("interrupted"):
                return await self._interrupt(step - 1)
            outcome = await self._process(step, llm)
            if outcome is not None:
                return outcome

    async def _process(self, step: int, llm: dict[str, Any]) -> dict[str, Any] | None:
        agent = self.agent
        result = step_result_adapter.validate_python(llm["result"])
        state: dict[str, Any] = llm["state"]
        terminating_call: ToolCall | None = None
        if self.terminating is not None and isinstance(result, ToolCallsStepResult):
            kept, terminating_call = truncate_at_terminating(
                result.tool_calls, self.terminating.tool_ids
            )
            result = result.model_copy(update={"tool_calls": kept})
        plan = plan_step_processing(
            result,
            mode=self.mode,
            validate_output=agent.validate_output if agent.output_schema is not None else None,
        )
        commit = StepCommit(self.session_id, self.run_id, agent.name, step)
        commit.usage.append(
            UsageRecord(
                f"{self.run_id}:{step}:llm",
                "llm",
                step,
                llm=result.usage or LLMUsage(model=agent.llm.model),
            )
        )
        if plan.assistant_message_plan is not None:
            commit.messages.append(create_assistant_message(plan.assistant_message_plan))
        if plan.is_terminal and plan.status_update is not None:
            commit.status = plan.status_update.status
            commit.output = plan.status_update.output
            commit.error = plan.status_update.error
        self._apply_finish(plan, commit)
        if plan.pending_tool_calls:
            new_state = await self._run_tools(
                step, plan.pending_tool_calls, state, commit, in_order=terminating_call is not None
            )
            if new_state != state:
                commit.state = new_state
                commit.events.append(
                    (f"{self.run_id}:{step}:state", "state_patch", _state_patch(state, new_state))
                )
        if terminating_call is not None and commit.status is None:
            outcome = self._outcomes.get(terminating_call.id)
            if outcome is not None and outcome["success"]:
                commit.status, commit.output = "completed", outcome["result"]
        self._apply_nudges(plan, commit)
        if commit.status is None:
            self._pending = commit
            return None
        await self._commit_final(commit)
        return await self._after_finish(step, commit.status, commit.output, commit.error)

    async def _commit_final(self, commit: StepCommit) -> None:
        """The run's last write: any step still unwritten, this one, the final status."""
        if self._ahead is not None:
            await self._ahead.settled()
        await DBOS.run_step_async(FINAL_STEP_OPTIONS, _final_step, commit, self._pending)
        self._pending = None

    def _apply_finish(self, plan: StepProcessingPlan, commit: StepCommit) -> None:
        if not plan.finish_call_ids:
            return
        if plan.finish_error is None:
            commit.messages.append(synthesize_finish_tool_result(plan.finish_call_ids[0]))
            return
        self.output_retries += 1
        logger.warning(
            "Agent '%s' (run %s) called %s with invalid output (attempt %d of %d): %s",
            self.agent.name,
            self.run_id,
            FINISH_TOOL_NAME,
            self.output_retries,
            self.agent.max_output_retries + 1,
            plan.finish_error,
        )
        for call_id in plan.finish_call_ids:
            commit.messages.append(
                create_tool_result_message(
                    call_id, FINISH_TOOL_NAME, success=False, error=plan.finish_error
                )
            )
        if self.output_retries > self.agent.max_output_retries:
            commit.status = "failed"
            commit.error = (
                f"Output validation failed {self.output_retries} times: {plan.finish_error}"
            )

    def _apply_nudges(self, plan: StepProcessingPlan, commit: StepCommit) -> None:
        mode = self.mode
        limit, custom = self.agent.max_consecutive_nudges, self.agent.nudge_message
        if self.terminating is not None:
            limit, custom = self.terminating.consecutive_nudges, self.terminating.nudge_message
        if plan.needs_completion_nudge:
            self.nudges += 1
            if self.nudges > limit:
                commit.status, commit.error = "failed", MAX_NUDGES_ERROR
            else:
                commit.messages.append(Message(role="user", content=completion_nudge(mode, custom)))
        elif plan.pending_tool_calls or plan.finish_call_ids:
            self.nudges = 0
        if plan.needs_max_tokens_correction:
            self.max_tokens_fixes += 1
            if self.max_tokens_fixes > 1:
                commit.status = "failed"
                commit.error = "The model stopped at the maximum output length (max_tokens) again after a correction"
            else:
                commit.messages.append(
                    Message(
                        role="user",
                        content=max_tokens_correction(self.agent.max_tokens_correction, mode),
                    )
                )

    async def _run_tools(
        self,
        step: int,
        calls: list[ToolCall],
        state: dict[str, Any],
        commit: StepCommit,
        *,
        in_order: bool = False,
    ) -> dict[str, Any]:
        """Regular tools in parallel (gated ones after their human answer, workflow-level
        ones next), then finish_with tools one by one, seeing the new state. With
        `in_order` (a terminating call in the batch) every call runs one by one."""
        agent = self.agent
        is_finisher = {c.id: bool((t := agent.tool(c.name)) and t.finish_with) for c in calls}
        regular = [c for c in calls if not is_finisher[c.id]]
        finishers = [c for c in calls if is_finisher[c.id]]
        gated: dict[str, str] = {}
        if needs_gate_step(agent, regular):
            gated = await DBOS.run_step_async(
                {"name": "helix.gate"},
                evaluate_gates,
                self.session_id,
                self.run_id,
                agent.name,
                step,
                [c.model_dump(mode="json") for c in regular],
                state,
            )
        outcomes: dict[str, dict[str, Any]] = {}
        self._outcomes = outcomes
        in_workflow = {
            c.id for c in regular if (t := agent.tool(c.name)) is not None and t.runs_in_workflow
        }
        plain = [c for c in regular if c.id not in gated and c.id not in in_workflow]
        if in_order:
            # A terminating call in the batch: every call, whatever its kind, runs one by one.
            new_state = state
            for call in regular:
                if call.id in gated:
                    new_state = await self._run_gated(
                        step, [call], gated, new_state, commit, outcomes
                    )
                elif call.id in in_workflow:
                    new_state = await self._run_workflow_tool(step, call, new_state, outcomes)
                else:
                    new_state = await self._run_parallel(
                        step, [call], new_state, new_state, outcomes
                    )
        else:
            new_state = await self._run_parallel(step, plain, state, state, outcomes)
            for call in [c for c in regular if c.id in in_workflow]:
                new_state = await self._run_workflow_tool(step, call, new_state, outcomes)
            if gated:
                new_state = await self._run_gated(
                    step, [c for c in regular if c.id in gated], gated, new_state, commit, outcomes
                )
        winner: ToolCall | None = None
        for call in finishers:
            if winner is not None or commit.status == "failed":
                done = winner.name if winner else "a failed run"
                outcomes[call.id] = _not_executed(
                    f"Not executed: the run already completed via '{done}'"
                )
                continue
            out = await self._tool(step, call, new_state)
            outcomes[call.id] = out
            if out["state"] is not None:
                new_state = out["state"]
            if out["transform_error"]:
                commit.status, commit.error = "failed", out["transform_error"]
            elif out["success"]:
                winner = call
                commit.status, commit.output, commit.error = "completed", out["finish_output"], None
        for call in calls:
            out = outcomes[call.id]
            if runs_at_once(agent, call):  # a no-op if the tool step already wrote it live
                commit.events.append(tool_start_chunk(self.run_id, step, call))
            commit.messages.append(
                create_tool_result_message(
                    call.id,
                    call.name,
                    result=out["content"],
                    success=out["success"],
                    error=out["error"],
                )
            )
            if out.get("duration_ms") is not None:
                commit.usage.append(
                    UsageRecord(
                        f"{self.run_id}:{step}:tool:{call.id}",
                        out.get("usage_kind", "tool"),
                        step,
                        tool_name=call.name,
                        duration_ms=out["duration_ms"],
                        success=out["success"],
                    )
                )
            for i, event in enumerate(out.get("events") or []):
                commit.events.append((f"{self.run_id}:{step}:{call.id}:{i}", "custom", event))
            end = {"tool_call_id": call.id, "tool_name": call.name, "success": out["success"]}
            end.update({"result": out["content"]} if out["success"] else {"error": out["error"]})
            commit.events.append((f"{self.run_id}:{step}:{call.id}:end", "tool_end", end))
        return new_state

    async def _run_workflow_tool(
        self, step: int, call: ToolCall, state: dict[str, Any], outcomes: dict[str, dict[str, Any]]
    ) -> dict[str, Any]:
        out = await self._workflow_tool(step, call, state)
        outcomes[call.id] = out
        return out["state"] if out["state"] is not None else state

    async def _workflow_tool(
        self, step: int, call: ToolCall, state: dict[str, Any]
    ) -> dict[str, Any]:
        """Run a workflow-level tool in workflow code (it may start child workflows)."""
        tool = self.agent.tool(call.name)
        assert tool is not None
        ctx = ToolContext(
            session_id=self.session_id,
            run_id=self.run_id,
            agent_name=self.agent.name,
            tool_call_id=call.id,
            tool_name=call.name,
            step=step,
            state=state,
            state_schema=self.agent.state_schema,
        )
        started = time.perf_counter()
        try:
            value = await tool.call(tool.validate_arguments(call.arguments), ctx)
            success, result, error = True, to_jsonable_python(value, fallback=str), None
        except ToolArgumentsError as exc:
            success, result, error = False, None, str(exc)
        except Exception as exc:
            success, result, error = False, None, f"Tool '{call.name}' failed: {exc}"
        content = to_json_text(result) if success else None
        duration_ms = (time.perf_counter() - started) * 1000
        await DBOS.run_step_async(
            {"name": f"helix.tool_hooks:{call.name}"},
            client_outcome_step,
            self.session_id,
            self.run_id,
            self.agent.name,
            step,
            call.model_dump(mode="json"),
            content,
            error,
            duration_ms,
        )
        changed = ctx.state_dict if ctx.state_dict != state else None
        return {
            "success": success,
            "content": content,
            "result": result,
            "error": error,
            "state": changed,
            "events": to_jsonable_python(ctx.events, fallback=str),
            "duration_ms": duration_ms,
            "finish_output": None,
            "transform_error": None,
        }

    async def _tool(self, step: int, call: ToolCall, state: dict[str, Any]) -> dict[str, Any]:
        return await DBOS.run_step_async(
            {"name": f"helix.tool:{call.name}"},
            tool_step,
            self.session_id,
            self.run_id,
            self.agent.name,
            step,
            call.model_dump(mode="json"),
            state,
        )

    async def _run_parallel(
        self,
        step: int,
        calls: list[ToolCall],
        base: dict[str, Any],
        current: dict[str, Any],
        outcomes: dict[str, dict[str, Any]],
    ) -> dict[str, Any]:
        """Run calls concurrently at step ids reserved in call order; merge their state changes."""
        if not calls:
            return current
        reservations = [DBOS.reserve_step() for _ in calls]
        results = await asyncio.gather(
            *(
                r.run_async(
                    {"name": f"helix.tool:{c.name}"},
                    tool_step,
                    self.session_id,
                    self.run_id,
                    self.agent.name,
                    step,
                    c.model_dump(mode="json"),
                    base,
                )
                for r, c in zip(reservations, calls, strict=True)
            )
        )
        merged = dict(current)
        for call, out in zip(calls, results, strict=True):
            outcomes[call.id] = out
            merged = _merge_state(merged, base, out["state"])
        return merged

    async def _run_gated(
        self,
        step: int,
        calls: list[ToolCall],
        gated: dict[str, str],
        state: dict[str, Any],
        commit: StepCommit,
        outcomes: dict[str, dict[str, Any]],
    ) -> dict[str, Any]:
        """Wait for every human answer together, then run what was approved."""
        timeouts = {c.id: self._timeout(c, gated[c.id]) for c in calls}
        pending = [
            PendingToolCall(c.id, c.name, gated[c.id], c.arguments, timeouts[c.id]) for c in calls
        ]
        answers = await HumanWait(self.rt, self.session_id, self.run_id, self.agent, step).wait(
            pending
        )
        approved: list[ToolCall] = []
        for call in calls:
            answer = answers[call.id]
            payload = answer.payload
            if gated[call.id] == "approval":
                if payload is not None and payload["approved"]:
                    approved.append(call)
                    continue
                error = (
                    timeout_message(call, "approval", timeouts[call.id])
                    if payload is None
                    else denial_message(call.id, payload.get("reason"))
                )
                outcomes[call.id] = _not_executed(error)
                continue
            kind = gated[call.id]
            if payload is None:
                content, error = None, timeout_message(call, kind, timeouts[call.id])
            elif kind == "human_input":
                answer_data = {
                    "human_input": payload.get("human_input"),
                    "approved": payload.get("approved"),
                }
                content, error = to_json_text(answer_data), None
            elif payload.get("error") is not None:
                content, error = None, str(payload["error"])
            else:
                content, error = to_json_text(payload.get("result")), None
            await DBOS.run_step_async(
                {"name": f"helix.client_result:{call.name}"},
                client_outcome_step,
                self.session_id,
                self.run_id,
                self.agent.name,
                step,
                call.model_dump(mode="json"),
                content,
                error,
                answer.wait_ms,
            )
            outcomes[call.id] = {
                "success": error is None,
                "content": content,
                "result": content,
                "error": error,
                "state": None,
                "events": [],
                "duration_ms": answer.wait_ms,
                "usage_kind": "client_tool_wait_ms" if kind == "client" else "human_input_wait_ms",
            }
        return await self._run_parallel(step, approved, state, state, outcomes)

    def _timeout(self, call: ToolCall, kind: str) -> float:
        tool = self.agent.tool(call.name)
        if kind != "approval" and tool is not None and tool.client_timeout_seconds is not None:
            return tool.client_timeout_seconds
        if kind == "client":
            return self.rt.client_tool_timeout_seconds
        return self.rt.approval_timeout_seconds

    async def _interrupt(self, step: int) -> dict[str, Any]:
        message = await DBOS.recv_async(INTERRUPT_TOPIC, timeout_seconds=0)
        reason = message.get("reason") if isinstance(message, dict) else None
        error = f"Interrupted: {reason}" if reason else "Interrupted"
        commit = StepCommit(
            self.session_id, self.run_id, self.agent.name, step, status="interrupted", error=error
        )
        commit.events.append((f"{self.run_id}:interrupted", "run_interrupted", {"reason": reason}))
        await self._commit_final(commit)
        return await self._after_finish(step, "interrupted", None, error)

    async def _finish_without_step(self, step: int, status: str, *, error: str) -> dict[str, Any]:
        commit = StepCommit(
            self.session_id, self.run_id, self.agent.name, step, 0, status=status, error=error
        )
        await self._commit_final(commit)
        return await self._after_finish(step, status, None, error)

    async def _after_finish(
        self, step: int, status: str, output: Any, error: str | None
    ) -> dict[str, Any]:
        hooks = self.agent.hooks
        hook = hooks.on_agent_complete if status == "completed" else hooks.on_agent_failed
        if hook is not None:
            event = RunEvent(
                HookContext(self.session_id, self.run_id, self.agent.name, step),
                status,
                output,
                error,
            )
            await DBOS.run_step_async({"name": f"helix.hook:{status}"}, _fire_hook, hook, event)
        return {
            "status": status,
            "output": output,
            "error": error,
            "session_id": self.session_id,
            "run_id": self.run_id,
            "step_count": step,
            **(
                {"response": response_text(output) if status == "completed" else None}
                if self.terminating
                else {}
            ),
        }


async def _final_step(commit: StepCommit, pending: StepCommit | None) -> dict[str, Any]:
    """One transaction; its writes are keyed or guarded by the run's status, so a step
    replayed after a crash before its checkpoint changes nothing."""
    async with current_runtime().engine.begin() as conn:
        return await commit_final(conn, commit, pending)


async def _fire_hook(hook: Any, event: RunEvent) -> None:
    from helix_dbos.runtime.steps import _safe_fire

    await _safe_fire(hook, event)


def _not_executed(reason: str) -> dict[str, Any]:
    return {
        "success": False,
        "content": None,
        "result": None,
        "error": reason,
        "state": None,
        "events": [],
        "duration_ms": None,
    }


def _merge_state(
    current: dict[str, Any], base: dict[str, Any], changed: dict[str, Any] | None
) -> dict[str, Any]:
    """Apply one parallel tool's top-level changes (against the shared base) in call order."""
    if changed is None:
        return current
    merged = dict(current)
    for key, value in changed.items():
        if base.get(key, _MISSING) != value:
            merged[key] = value
    for key in base:
        if key not in changed:
            merged.pop(key, None)
    return merged


_MISSING = object()


def _state_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    return {
        "set": {k: v for k, v in new.items() if old.get(k, _MISSING) != v},
        "removed": [k for k in old if k not in new],
    }


@DBOS.workflow(name=WORKFLOW_NAME)
async def agent_run_workflow(
    run_id: str, session_id: str, agent_name: str, options: dict[str, Any] | None = None
) -> dict[str, Any]:
    rt = current_runtime()
    loop = AgentLoop(rt, run_id, session_id, rt.agent(agent_name), options)
    try:
        return await loop.run()
    except Exception as exc:  # a bug must not leave the run `running` forever
        logger.exception("Agent run %s failed with an unexpected error", run_id)
        error = f"Internal error: {type(exc).__name__}: {exc}"
        return await loop._finish_without_step(loop.steps_taken, "failed", error=error)
