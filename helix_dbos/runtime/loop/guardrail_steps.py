"""Guardrail checks as durable steps (issue 50): `helix.guardrail:<kind>:<name>`.

Taken only by agents with guardrails, so other runs checkpoint the same steps. Each
check is its own DBOS step: one that passed is never run again on a recovery, and one
that tripped ends the run with the same outcome after a crash.
"""

from __future__ import annotations

import inspect
from typing import Any

from dbos import DBOS

from helix_dbos.definitions.agent import Agent
from helix_dbos.orchestration.guardrails import (
    GUARDRAIL_STOP,
    GuardrailCheck,
    GuardrailKind,
    GuardrailResult,
    guardrail_name,
)
from helix_dbos.orchestration.messages import to_json_text
from helix_dbos.orchestration.next_step import Fail
from helix_dbos.orchestration.types import Message
from helix_dbos.runtime.process.process_runtime import current_runtime
from helix_dbos.store.tree import run_input


async def first_tripped(
    agent: Agent, kind: GuardrailKind, run_id: str, output: Any = None
) -> GuardrailCheck | None:
    """Run the agent's `kind` guardrails in order, each in its step; the first tripwire."""
    guardrails = agent.input_guardrails if kind == "input" else agent.output_guardrails
    for index, guardrail in enumerate(guardrails):
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


async def _check(
    agent_name: str, kind: GuardrailKind, index: int, run_id: str, output: Any
) -> GuardrailCheck:
    """The step's body: the guardrail on the run's input (read here) or its output. A
    guardrail that raises or returns something else trips, saying why."""
    rt = current_runtime()
    agent = rt.agent(agent_name)
    guardrails = agent.input_guardrails if kind == "input" else agent.output_guardrails
    guardrail = guardrails[index]
    name = guardrail_name(guardrail)
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
