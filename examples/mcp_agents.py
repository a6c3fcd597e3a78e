"""Agents as MCP tools: serve them at /mcp, call one with the `mcp` SDK's own client.

    .venv/bin/python examples/mcp_agents.py serve                  # http://127.0.0.1:8000/mcp
    .venv/bin/python examples/mcp_agents.py call deployer "prod"   # asks you to approve
    .venv/bin/python examples/mcp_agents.py call deployer "prod" --yes
    HELIX_SERVER_TOKEN=s3cret .venv/bin/helix-dbos serve --app examples/mcp_agents.py:helix --mcp

`call` speaks the tasks extension (`MCPTasks`): the call is an MCP task whose id is
the helix run id, followed to its end; the approval the `deployer` agent needs comes
as an elicitation. With $HELIX_SERVER_TOKEN set, `call` sends it as the bearer token.
The model is scripted unless ANTHROPIC_API_KEY / OPENAI_API_KEY / HELIX_MODEL is set.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import httpx2
import mcp_types as types
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from helix_dbos import (
    Agent,
    HelixDBOS,
    LLMConfig,
    LLMRequest,
    MCPTasks,
    MockLLM,
    create_app,
    model_from_env,
    tool,
)


@tool(require_approval=True)
def deploy(target: str) -> str:
    """Deploy to a target (a human approves it first)."""
    return f"deployed to {target}"


def scripted_model(request: LLMRequest) -> dict:
    """`deployer` deploys what it is asked to, then reports; `greeter` greets."""
    asked = next((m.content or "" for m in request.messages if m.role == "user"), "")
    results = [m for m in request.messages if m.role == "tool"]
    if request.agent_name == "greeter":
        return {"type": "text", "content": f"Hello, {asked}!"}
    if not results:
        call = {"id": "call_deploy", "name": "deploy", "arguments": {"target": asked}}
        return {"type": "tool_calls", "tool_calls": [call]}
    outcome = "refused" if results[-1].is_error else results[-1].content
    return {"type": "text", "content": f"Deployment: {outcome}."}


model = model_from_env()
llm = LLMConfig(model=model or "mock")
helix = HelixDBOS(
    [
        Agent("greeter", system_prompt="Greet whoever is named.", llm=llm),
        Agent("deployer", system_prompt="Deploy when asked.", tools=[deploy], llm=llm),
    ],
    llm=None if model else MockLLM(scripted_model),
)


def serve(port: int = 8000) -> None:
    app = create_app(helix, allow_unauthenticated=True, mcp_agents=True)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


async def call(url: str, agent: str, text: str, *, yes: bool) -> str:
    async def ask(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        answer = "y" if yes else await asyncio.to_thread(input, f"{params.message} [y/N] ")
        approved = answer.strip().lower() in ("y", "yes")
        return types.ElicitResult(action="accept", content={"approved": approved})

    token = os.environ.get("HELIX_SERVER_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        Client(
            streamable_http_client(url, http_client=http),
            extensions=[MCPTasks()],
            elicitation_callback=ask,
        ) as client,
    ):
        result = await client.call_tool(agent, {"input": text})
    block = result.content[0]
    return block.text if isinstance(block, types.TextContent) else str(block)


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["call"] and len(args) >= 3:
        url = os.environ.get("MCP_URL", "http://127.0.0.1:8000/mcp")
        print(asyncio.run(call(url, args[1], args[2], yes="--yes" in args)))
    elif args[:1] == ["serve"]:
        serve(int(os.environ.get("PORT", "8000")))
    else:
        sys.exit(__doc__)
