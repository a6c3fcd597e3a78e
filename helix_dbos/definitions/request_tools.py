"""Client tools a caller declares for one run (AG-UI's front-end tools), not on the agent.

A run started with `client_tools` offers them to the model next to the agent's own tools,
as `execute="client"` tools: a call waits for the client's result (a
`client_tool_request` chunk, answered through `submit_tool_result`). The specs are part
of the run's workflow input (`RunOptions.client_tools`), so a run recovered after a crash
sees the same tools; the agent a run works with is its definition extended by them
(`with_client_tools`).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from helix_dbos.definitions.agent import Agent
from helix_dbos.definitions.tool import Tool
from helix_dbos.errors import InvalidInputError
from helix_dbos.orchestration.types import ToolSpec

EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class ClientToolSpec:
    """One declared client tool: its name, description and JSON schema (as JSON text, so
    the spec stays hashable and pickles as plain data in the workflow input)."""

    name: str
    description: str = ""
    parameters_json: str = json.dumps(EMPTY_SCHEMA)

    @classmethod
    def of(cls, name: str, description: str = "", parameters: Any = None) -> ClientToolSpec:
        schema = parameters if isinstance(parameters, dict) and parameters else EMPTY_SCHEMA
        return cls(name, description or "", json.dumps(schema, sort_keys=True))

    @property
    def parameters(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.parameters_json)
        return value


class _AnyArguments(BaseModel):
    """The client validates its own tool's arguments: any JSON object passes here."""

    model_config = ConfigDict(extra="allow")


class RequestTool(Tool):
    """A client tool built from a `ClientToolSpec`: the model sees the declared schema."""

    def __init__(self, spec: ClientToolSpec) -> None:
        super().__init__(
            spec.name, description=spec.description, input_model=_AnyArguments, execute="client"
        )
        self.request_spec = spec

    def _build_spec(self) -> ToolSpec:
        return ToolSpec(
            name=self.name, description=self.description, parameters=self.request_spec.parameters
        )


def check_client_tools(agent: Agent, specs: tuple[ClientToolSpec, ...]) -> None:
    """Refuse a declared tool whose name is taken (by the agent or another declared tool)."""
    seen: set[str] = set()
    for spec in specs:
        if not spec.name or agent.tool(spec.name) is not None or spec.name in seen:
            raise InvalidInputError(
                f"client tool '{spec.name}': the name is empty, or agent '{agent.name}' "
                "already has a tool of that name"
            )
        seen.add(spec.name)


def with_client_tools(agent: Agent, specs: tuple[ClientToolSpec, ...]) -> Agent:
    """`agent` with the declared client tools appended (the agent itself when none)."""
    if not specs:
        return agent
    extended = copy.copy(agent)
    extended.tools = [*agent.tools, *(RequestTool(s) for s in specs)]
    return extended
