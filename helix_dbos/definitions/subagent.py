"""`sub_agent_tool`: delegate to another agent as if it were a tool (seed 002).

The parent's model calls `subagent__<name>` with `{"message": "..."}` (or with the
child's own `input_schema`); the child runs to completion in its own session, as a
DBOS child workflow of the parent's run, and its output (or its error) is the tool's
result. The scheduling lives in `runtime/children/subagents.py`; this module only defines.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from helix_dbos.definitions.tool import Tool
from helix_dbos.errors import ToolDefinitionError
from helix_dbos.orchestration.messages import to_json_text
from helix_dbos.orchestration.types import SUBAGENT_PREFIX

if TYPE_CHECKING:
    from helix_dbos.definitions.agent import Agent


class SubAgentTool(Tool):
    """A tool whose call starts a child run of `agent`; never executed as a function."""

    def __init__(
        self, agent: Agent, *, name: str, description: str, input_model: type[BaseModel]
    ) -> None:
        super().__init__(
            f"{SUBAGENT_PREFIX}{name}",
            _runs_as_child_workflow,
            description=description,
            input_model=input_model,
        )
        self.agent = agent
        self.agent_name = agent.name

    def child_input(self, arguments: BaseModel) -> str:
        """The child's first user message: the `message`, or the input model as JSON."""
        if self.agent.input_schema is None:
            return str(getattr(arguments, "message"))  # noqa: B009  (a dynamic model)
        return to_json_text(arguments)


def sub_agent_tool(
    agent: Agent, *, name: str | None = None, description: str | None = None
) -> SubAgentTool:
    """A tool `subagent__<name>` that runs `agent` as a child of the calling run.

    Register `agent` with `HelixDBOS` like any agent: a recovered process finds the
    child's definition by name.
    """
    tool_name = name or agent.name
    if not tool_name.replace("_", "").replace("-", "").isalnum():
        raise ToolDefinitionError(
            f"sub_agent_tool: name {tool_name!r} must be letters, digits, '_' or '-'"
        )
    model = agent.input_schema or message_model(tool_name)
    text = description or (
        f"Delegate a task to the '{agent.name}' agent. It works on its own, in its own "
        "session, and its final answer comes back as this tool's result."
    )
    return SubAgentTool(agent, name=tool_name, description=text, input_model=model)


def message_model(name: str) -> type[BaseModel]:
    """A sub-agent tool's input when its agent has no `input_schema`: one message."""
    return create_model(
        f"{SUBAGENT_PREFIX}{name}_input",
        __config__=ConfigDict(extra="forbid"),
        message=(str, Field(description="The task for the sub-agent, in plain words")),
    )


def _runs_as_child_workflow(**_: Any) -> Any:
    raise ToolDefinitionError("A sub-agent tool runs as a child workflow, never as a function")
