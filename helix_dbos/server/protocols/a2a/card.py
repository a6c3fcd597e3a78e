"""An agent's A2A agent card: who it is, where its JSON-RPC endpoint is, its skills.

Helix agents have no separate description, so the card's description is the first
paragraph of the system prompt; each tool is a skill (its name and docstring), and an
agent without tools has one skill named after itself.
"""

from __future__ import annotations

from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
)
from a2a.types.a2a_pb2 import StringList
from a2a.utils.constants import PROTOCOL_VERSION_1_0, TransportProtocol

from helix_dbos.definitions.agent import Agent
from helix_dbos.definitions.companions import COMPANION_PREFIX
from helix_dbos.definitions.tool import Tool

BEARER = "bearer"


def _shown(tool: Tool) -> bool:
    """Tools helix adds on its own (built-ins, companions) are not skills to ask for."""
    return not getattr(tool, "builtin", False) and not tool.name.startswith(COMPANION_PREFIX)


def agent_description(agent: Agent) -> str:
    prompt = agent.system_prompt if isinstance(agent.system_prompt, str) else ""
    first = prompt.strip().split("\n\n", 1)[0].strip()
    return first or f"The helix agent '{agent.name}'."


def agent_card(agent: Agent, endpoint_url: str, *, authenticated: bool) -> AgentCard:
    """The card served at `<endpoint_url>/.well-known/agent-card.json`."""
    skills = [
        AgentSkill(
            id=tool.name,
            name=tool.name,
            description=tool.description or f"The tool {tool.name}.",
            tags=["tool"],
        )
        for tool in agent.tools
        if _shown(tool)
    ]
    if not skills:
        skills = [
            AgentSkill(
                id=agent.name,
                name=agent.name,
                description=agent_description(agent),
                tags=["agent"],
            )
        ]
    card = AgentCard(
        name=agent.name,
        description=agent_description(agent),
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(
                url=endpoint_url,
                protocol_binding=TransportProtocol.JSONRPC.value,
                protocol_version=PROTOCOL_VERSION_1_0,
            )
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=skills,
    )
    if authenticated:
        card.security_schemes[BEARER].CopyFrom(
            SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer"))
        )
        card.security_requirements.append(
            SecurityRequirement(schemes={BEARER: StringList(list=[])})
        )
    return card
