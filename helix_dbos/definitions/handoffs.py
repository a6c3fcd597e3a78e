"""Handoffs (issue 50): an agent hands the rest of the run, in the same session, to
another agent, as the OpenAI Agents SDK does.

`Agent(handoffs=[billing, Handoff(refunds, tool_name=..., input_filter=...)])` offers
the model one `transfer_to_<name>` tool per target. A call to one is never executed as
a function: the agent loop answers it in workflow code ("Transferred to billing") and
goes on with the target agent (`runtime/loop/handoff_switch.py`). This module only
defines.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from helix_dbos.definitions.tool import Tool
from helix_dbos.errors import AgentDefinitionError, ToolDefinitionError
from helix_dbos.orchestration.types import Message


class HandoffTarget(Protocol):
    """An `Agent`, as far as handoffs go (`agent.py` imports this module, not the reverse)."""

    name: str
    tools: list[Tool]


#: What the target's model sees of the session's transcript: a pure function of it
#: (called before every model call of the target in the run, so it must not vary).
InputFilter = Callable[[list[Message]], list[Message]]

HANDOFF_PREFIX = "transfer_to_"
#: The answer to every handoff call of a reply after its first (as openai-agents does).
EXTRA_HANDOFF_ERROR = "Multiple handoffs detected, ignoring this one."


def transferred_text(agent_name: str) -> str:
    """The tool result of the handoff taken."""
    return f"Transferred to {agent_name}"


def default_tool_name(agent_name: str) -> str:
    """openai-agents' name: `transfer_to_` and the agent's name in snake case."""
    snake = re.sub(r"[^a-zA-Z0-9_-]", "_", agent_name.strip()).lower()
    return f"{HANDOFF_PREFIX}{snake}"[:64]


@dataclass(frozen=True)
class Handoff:
    """One target of a handoff: the agent, and how the model sees the tool."""

    agent: HandoffTarget
    tool_name: str | None = None
    description: str | None = None
    input_filter: InputFilter | None = None

    @property
    def name(self) -> str:
        return self.tool_name or default_tool_name(self.agent.name)


class HandoffTool(Tool):
    """A `transfer_to_<name>` tool; the loop answers its calls, nothing executes it."""

    def __init__(self, handoff: Handoff) -> None:
        name = handoff.name
        if not re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", name):
            raise ToolDefinitionError(
                f"Handoff to '{handoff.agent.name}': tool name {name!r} must be 1 to 64 "
                "letters, digits, '_' or '-'"
            )
        text = handoff.description or (
            f"Hand off to the '{handoff.agent.name}' agent to handle the request: it "
            "continues this conversation in your place."
        )
        super().__init__(name, _answered_by_the_loop, description=text, input_model=_NoInput)
        self.handoff = handoff
        self.target = handoff.agent.name


class _NoInput(BaseModel):
    """A handoff takes no arguments; whatever the model sends is ignored."""

    model_config = ConfigDict(extra="ignore")


def _answered_by_the_loop(**_: Any) -> Any:
    raise ToolDefinitionError("A handoff tool is answered by the agent loop, never executed")


def handoff_tools(owner: str, handoffs: list[Any]) -> list[HandoffTool]:
    """The tools of an agent's `handoffs=`; each target once."""
    tools = [HandoffTool(h if isinstance(h, Handoff) else Handoff(h)) for h in handoffs]
    targets = [t.target for t in tools]
    if len(set(targets)) != len(targets):
        raise AgentDefinitionError(f"Agent '{owner}': a handoff target is listed twice")
    return tools


def handoff_targets(tools: list[Tool]) -> list[HandoffTool]:
    return [t for t in tools if isinstance(t, HandoffTool)]


def check_handoffs_registered(agents: Mapping[str, HandoffTarget]) -> None:
    """Every handoff target is a registered agent (the same definition), so a recovered
    run finds it by name: refused at registration or launch, never mid-run."""
    for agent in agents.values():
        for tool in handoff_targets(agent.tools):
            if agents.get(tool.target) is not tool.handoff.agent:
                raise AgentDefinitionError(
                    f"Agent '{agent.name}' hands off to '{tool.target}', which is not "
                    f"registered with HelixDBOS (registered: {', '.join(sorted(agents))}): "
                    "pass it in HelixDBOS(agents=[...]) too"
                )
