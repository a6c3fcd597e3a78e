"""`remote_sub_agent_tool`: delegate to an agent served by another helix server (seed 002).

The parent's model calls `subagent__<name>` with `{"message": "..."}` as it would a
local sub-agent; the child runs on the helix server at `url`, in a session whose id is
derived from the parent's session and the call id, started with an idempotency key
derived the same way, so a parent step replayed after a crash attaches to the run it
started instead of starting another. The scheduling lives in
`runtime/children/remote_children.py`; this module only defines.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel

from helix_dbos.definitions.subagent import message_model
from helix_dbos.definitions.tool import Tool
from helix_dbos.errors import ToolDefinitionError
from helix_dbos.orchestration.types import SUBAGENT_PREFIX

# A bearer token, a function returning one (read when a call is made, so a rotated
# secret is picked up), or None for a server that runs without authentication.
RemoteAuth = str | Callable[[], str] | None
# "helix": `url` is a helix server and `agent_name` one of its agents; "a2a": `url` is an
# A2A agent's endpoint (its card at `<url>/.well-known/agent-card.json`), for example a
# helix server's `/a2a/<agent>` (a2a_wire/remote.py).
RemoteProtocol = Literal["helix", "a2a"]


class RemoteSubAgentTool(Tool):
    """A tool whose call runs `agent_name` on the helix server at `url`; never executed
    as a function. Unreachable servers and 5xx answers are retried as durable steps
    (`max_attempts`, from `retry_interval_seconds`, doubling); a 4xx, an unknown agent
    or a refused token is a tool error the model sees."""

    def __init__(
        self,
        url: str,
        agent_name: str,
        *,
        auth: RemoteAuth,
        name: str,
        description: str,
        max_attempts: int,
        retry_interval_seconds: float,
        protocol: RemoteProtocol = "helix",
    ) -> None:
        super().__init__(
            f"{SUBAGENT_PREFIX}{name}",
            _runs_remotely,
            description=description,
            input_model=message_model(name),
            runs_in_workflow=True,
        )
        self.url = url.rstrip("/")
        self.agent_name = agent_name
        self.auth = auth
        self.max_attempts = max_attempts
        self.retry_interval_seconds = retry_interval_seconds
        self.protocol = protocol

    def token(self) -> str | None:
        return self.auth() if callable(self.auth) else self.auth

    def child_input(self, arguments: BaseModel) -> str:
        return str(getattr(arguments, "message"))  # noqa: B009  (a dynamic model)


def remote_sub_agent_tool(
    url: str,
    agent_name: str,
    *,
    auth: RemoteAuth,
    name: str | None = None,
    description: str | None = None,
    max_attempts: int = 8,
    retry_interval_seconds: float = 1.0,
    protocol: RemoteProtocol = "helix",
) -> RemoteSubAgentTool:
    """A tool `subagent__<name>` that runs the agent `agent_name` of the helix server at
    `url` as a child of the calling run. `auth` is that server's bearer token (or a
    function returning it, or None for an unauthenticated local server). With
    `protocol="a2a"`, `url` is any A2A agent's endpoint (`agent_name` names it here)."""
    if not url.startswith(("http://", "https://")):
        raise ToolDefinitionError(f"remote_sub_agent_tool: url {url!r} must be http(s)://...")
    tool_name = name or agent_name
    if not tool_name.replace("_", "").replace("-", "").isalnum():
        raise ToolDefinitionError(
            f"remote_sub_agent_tool: name {tool_name!r} must be letters, digits, '_' or '-'"
        )
    if max_attempts < 1 or retry_interval_seconds <= 0:
        raise ToolDefinitionError(
            "remote_sub_agent_tool: max_attempts must be >= 1, retry_interval_seconds > 0"
        )
    if protocol not in ("helix", "a2a"):
        raise ToolDefinitionError(
            f"remote_sub_agent_tool: protocol {protocol!r} must be 'helix' or 'a2a'"
        )
    if protocol == "a2a" and importlib.util.find_spec("a2a") is None:
        raise ToolDefinitionError(
            "remote_sub_agent_tool: protocol='a2a' needs the a2a extra: "
            "pip install 'helix-dbos[a2a]'"
        )
    text = description or (
        f"Delegate a task to the '{agent_name}' agent (on another server). It works on its "
        "own, in its own session, and its final answer comes back as this tool's result."
    )
    return RemoteSubAgentTool(
        url,
        agent_name,
        auth=auth,
        name=tool_name,
        description=text,
        max_attempts=max_attempts,
        retry_interval_seconds=retry_interval_seconds,
        protocol=protocol,
    )


def _runs_remotely(**_: Any) -> Any:
    raise ToolDefinitionError("A remote sub-agent tool runs on its server, never as a function")
