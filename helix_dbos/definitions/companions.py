"""Companion tools: the parent's handle on its persistent sub-agents (seed 002).

"Up to six tools prefixed with companion__: spawnAgent (create and start a child),
sendMessage (interrupt/resume a running child with a new message), listChildren (list
all persistent children), getChildStatus (check a specific child's status and output),
terminateChild (kill a running child) — these five are always injected. The sixth tool,
waitForResult (blocks until a child completes), is conditionally injected only when at
least one persistent agent has mode: 'blocking' configured."

They run in the parent's workflow code (`runtime/children/companions.py`); this module only
defines them, from the persistent agents' names and modes.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from helix_dbos.definitions.tool import Tool
from helix_dbos.errors import ToolDefinitionError

COMPANION_PREFIX = "companion__"
CompanionMode = Literal["blocking", "non_blocking"]
OnParentEnd = Literal["keep_running", "stop"]
_STRICT = ConfigDict(extra="forbid")


class CompanionTool(Tool):
    """One `companion__<action>` tool; never executed as a function."""

    def __init__(self, action: str, description: str, input_model: type[BaseModel]) -> None:
        super().__init__(
            f"{COMPANION_PREFIX}{action}",
            _runs_in_the_parents_workflow,
            description=description,
            input_model=input_model,
        )
        self.action = action


def companion_tools(modes: dict[str, CompanionMode]) -> list[CompanionTool]:
    """The companion tools for persistent agents named by `modes` (agent name -> mode)."""
    if not modes:
        return []
    agent_type: Any = Literal[tuple(modes)]
    kinds = ", ".join(f"{name} ({mode.replace('_', '-')})" for name, mode in modes.items())
    tools = [
        CompanionTool(
            "spawnAgent",
            f"Create and start a persistent child agent: {kinds}. A blocking child's answer "
            "is this tool's result; a non-blocking one works on while you continue, and its "
            "completion is announced in a later message. A child keeps its memory: spawning "
            "a name that exists continues that child.",
            create_model(
                "companion__spawnAgent_input",
                __config__=_STRICT,
                agentType=(agent_type, Field(description="Which persistent agent")),
                message=(str, Field(description="The task")),
                name=(str | None, Field(None, description="A name; default <agentType>-<n>")),
            ),
        ),
        CompanionTool(
            "sendMessage",
            "Send a child a follow-up message: a running child is interrupted and resumes "
            "with it; a finished one starts a new turn.",
            create_model(
                "companion__sendMessage_input",
                __config__=_STRICT,
                name=(str, ...),
                message=(str, ...),
            ),
        ),
        CompanionTool(
            "listChildren",
            "List your persistent children: name, agent type, mode and status.",
            create_model("companion__listChildren_input", __config__=_STRICT),
        ),
        CompanionTool(
            "getChildStatus",
            "A child's status, and its output or error once it has one.",
            create_model("companion__getChildStatus_input", __config__=_STRICT, name=(str, ...)),
        ),
        CompanionTool(
            "terminateChild",
            "Stop a running child.",
            create_model(
                "companion__terminateChild_input",
                __config__=_STRICT,
                name=(str, ...),
                reason=(str | None, None),
            ),
        ),
    ]
    if "blocking" in modes.values():
        tools.append(
            CompanionTool(
                "waitForResult",
                "Wait until a child has finished its current work and return its result.",
                create_model(
                    "companion__waitForResult_input",
                    __config__=_STRICT,
                    name=(str, ...),
                    timeoutSeconds=(float, Field(300.0, gt=0, le=86400)),
                ),
            )
        )
    return tools


def _runs_in_the_parents_workflow(**_: Any) -> Any:
    raise ToolDefinitionError("A companion tool runs in its parent's workflow, never as a function")
