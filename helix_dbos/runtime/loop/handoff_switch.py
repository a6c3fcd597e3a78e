"""Handoffs in the agent loop (issue 50, `definitions/handoffs.py`).

How a handoff maps onto DBOS: the run goes on in the same workflow with the target
agent. The model's reply, whose calls decide the handoff, is the `helix.llm` step's
checkpoint; the first `transfer_to_<name>` call of the reply is answered in workflow
code ("Transferred to billing"; any other handoff call of the reply with an error, as
openai-agents does), with no step of its own; the handoff's row is written by one
`helix.handoff` datasource transaction, exactly once with its checkpoint, before the
target's first LLM step. So a replay takes the same handoff, finds the row written,
and asks the target's model only where no checkpoint answers: one handoff, one
answer. A run of an agent with handoffs starts with the session's current agent,
read by a `helix.handoff_current` transaction (checkpointed, so a replay starts with
the same one). Agents without handoffs take neither step.
"""

from __future__ import annotations

from dataclasses import dataclass

from helix_dbos.definitions.agent import Agent
from helix_dbos.definitions.handoffs import (
    EXTRA_HANDOFF_ERROR,
    HandoffTool,
    handoff_targets,
    transferred_text,
)
from helix_dbos.orchestration.types import ToolCall
from helix_dbos.runtime.process.process_runtime import Runtime
from helix_dbos.runtime.steps.step_types import ToolOutcome
from helix_dbos.store.features import handoff_rows
from helix_dbos.store.features.handoff_rows import HandoffRow


@dataclass(frozen=True)
class HandoffCalls:
    """A step's calls split: the others run as usual; the handoff ones are answered here."""

    others: list[ToolCall]
    outcomes: dict[str, ToolOutcome]
    taken: HandoffTool | None = None
    call_id: str | None = None


def split_calls(agent: Agent, calls: list[ToolCall]) -> HandoffCalls | None:
    """`None` when no call of the step is a handoff (every agent without handoffs)."""
    tools = {t.name: t for t in handoff_targets(agent.tools)}
    if not tools or not any(c.name in tools for c in calls):
        return None
    others: list[ToolCall] = []
    outcomes: dict[str, ToolOutcome] = {}
    taken: HandoffTool | None = None
    call_id: str | None = None
    for call in calls:
        tool = tools.get(call.name)
        if tool is None:
            others.append(call)
        elif taken is None:
            taken, call_id = tool, call.id
            text = transferred_text(tool.target)
            outcomes[call.id] = ToolOutcome(success=True, content=text, result=text)
        else:
            outcomes[call.id] = ToolOutcome.not_executed(EXTRA_HANDOFF_ERROR)
    return HandoffCalls(others, outcomes, taken, call_id)


async def record_handoff(rt: Runtime, row: HandoffRow) -> None:
    """The handoff's row, in a datasource transaction: exactly once with its checkpoint."""
    await rt.transaction("helix.handoff", handoff_rows.record, row)


async def starting_agent(rt: Runtime, agent: Agent, session_id: str) -> Agent:
    """The agent a run of `agent` starts with: the session's current one when `agent`
    hands off (a later message goes on with the agent the last handoff chose)."""
    if not handoff_targets(agent.tools):
        return agent
    name = await rt.transaction("helix.handoff_current", handoff_rows.current_agent, session_id)
    if name is None or name == agent.name:
        return agent
    return rt.agent(name)
