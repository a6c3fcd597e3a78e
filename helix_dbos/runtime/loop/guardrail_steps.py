"""Guardrail checks as durable steps (issue 50): `helix.guardrail:<kind>:<name>`.

Taken only by agents with guardrails, so other runs checkpoint the same steps. Each
check is its own DBOS step: one that passed is never run again on a recovery, and one
that tripped ends the run with the same outcome after a crash.
"""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import replace
from typing import Any

from dbos import DBOS

from helix_dbos.definitions.agent import Agent
from helix_dbos.orchestration.guardrails import (
    GUARDRAIL_STOP,
    Guardrail,
    GuardrailCheck,
    GuardrailKind,
    GuardrailResult,
    guardrail_name,
    runs_in_parallel,
)
from helix_dbos.orchestration.messages import to_json_text
from helix_dbos.orchestration.next_step import Fail, ToolsDone
from helix_dbos.orchestration.types import Message, ToolCall
from helix_dbos.runtime.loop.step_rows import tool_rows
from helix_dbos.runtime.loop.tool_batch import BatchResult
from helix_dbos.runtime.process.process_runtime import current_runtime
from helix_dbos.runtime.steps.commit import StepCommit
from helix_dbos.runtime.steps.step_types import ToolOutcome
from helix_dbos.store.tree import run_input


async def first_tripped(
    agent: Agent, kind: GuardrailKind, run_id: str, output: Any = None
) -> GuardrailCheck | None:
    """Run the agent's `kind` guardrails in order, each in its step; the first tripwire.
    Input guardrails that run in parallel are not among them (`start_parallel`)."""
    guardrails = agent.input_guardrails if kind == "input" else agent.output_guardrails
    for index, guardrail in enumerate(guardrails):
        if kind == "input" and runs_in_parallel(guardrail):
            continue
        name = guardrail_name(guardrail)
        check: GuardrailCheck = await DBOS.run_step_async(
            {"name": f"helix.guardrail:{kind}:{name}"},
            _check,
            agent.name,
            kind,
            index,
            run_id,
            output,
        )
        if check.tripwire:
            return check
    return None


def start_parallel(agent: Agent, run_id: str) -> list[asyncio.Future[GuardrailCheck]]:
    """The checks of the input guardrails that run in parallel, started now, before the
    first LLM step: each at a step id reserved in declaration order, so a replay finds
    the same ids whichever check ends first."""
    started: list[asyncio.Future[GuardrailCheck]] = []
    for index, guardrail in enumerate(agent.input_guardrails):
        if not runs_in_parallel(guardrail):
            continue
        reserved = DBOS.reserve_step()
        check = reserved.run_async(
            {"name": f"helix.guardrail:input:{guardrail_name(guardrail)}"},
            _check,
            agent.name,
            "input",
            index,
            run_id,
            None,
        )
        started.append(asyncio.ensure_future(check))
    return started


async def parallel_tripped(started: list[asyncio.Future[GuardrailCheck]]) -> GuardrailCheck | None:
    """Every started check's outcome (all are awaited); the first tripwire, in order."""
    checks = await asyncio.gather(*started)
    return next((c for c in checks if c.tripwire), None)


async def tool_tripped(agent: Agent, calls: list[ToolCall]) -> GuardrailCheck | None:
    """The guardrails of the step's calls, in call order, each in its step, before any
    of them runs or waits for an approval; the first tripwire."""
    for call in calls:
        tool = agent.tool(call.name)
        for index, guardrail in enumerate(tool.guardrails if tool is not None else []):
            name = f"{call.name}.{guardrail_name(guardrail)}"
            check: GuardrailCheck = await DBOS.run_step_async(
                {"name": f"helix.guardrail:tool:{name}"},
                _check,
                agent.name,
                "tool",
                index,
                call.name,
                call.arguments,
            )
            if check.tripwire:
                return check
    return None


def _guardrail(agent: Agent, kind: GuardrailKind, index: int, tool_name: str) -> Guardrail:
    tool = agent.tool(tool_name) if kind == "tool" else None
    if tool is not None:
        return tool.guardrails[index]
    return (agent.input_guardrails if kind == "input" else agent.output_guardrails)[index]


async def _check(
    agent_name: str, kind: GuardrailKind, index: int, run_id: str, output: Any
) -> GuardrailCheck:
    """The step's body: the guardrail on the run's input (read here), its output, or a
    call's arguments (`run_id` is then the tool's name). A guardrail that raises or
    returns something else trips, saying why."""
    rt = current_runtime()
    guardrail = _guardrail(rt.agent(agent_name), kind, index, run_id)
    name = guardrail_name(guardrail)
    if kind == "tool":
        name = f"{run_id}.{name}"
    value = await rt.read(run_input, run_id) if kind == "input" else output
    try:
        said: object = guardrail(value)
        if inspect.isawaitable(said):
            said = await said
    except Exception as exc:
        return GuardrailCheck(kind, name, True, f"the guardrail raised {type(exc).__name__}: {exc}")
    if not isinstance(said, GuardrailResult):
        return GuardrailCheck(kind, name, True, f"the guardrail returned {type(said).__name__}")
    return GuardrailCheck(kind, name, said.tripwire, said.reason, said.info)


def guardrail_ending(check: GuardrailCheck) -> Fail:
    """The run's end when a tripwire fired: failed, `stop_reason="guardrail"`."""
    return Fail(check.message, stop_reason=GUARDRAIL_STOP)


def guardrail_message(check: GuardrailCheck) -> Message:
    """What the transcript says of it: the run's last message."""
    text = {"guardrail": check.name, "kind": check.kind, "reason": check.reason}
    return Message(role="assistant", content=f"[guardrail tripped] {to_json_text(text)}")


def tripped_tools(
    commit: StepCommit,
    agent: Agent,
    calls: list[ToolCall],
    state: dict[str, Any],
    check: GuardrailCheck,
) -> ToolsDone:
    """A tool guardrail tripped: no call of the step runs, each gets the tripwire as its
    result (so the transcript says it), and the run fails."""
    outcomes = {c.id: ToolOutcome.not_executed(check.message) for c in calls}
    done = tool_rows(commit, agent, calls, BatchResult(outcomes, state), state, None)
    return replace(done, ending=guardrail_ending(check))
