"""A real helix server serving agents as MCP tools (tests/test_mcp_server.py).

usage: mcp_agents_app.py DATABASE_URL PORT EXECUTOR_ID MARKER_DIR

Agents: `echo` answers "echo: <input>"; `deployer` calls `deploy` (which needs an
approval) and answers "deployer: <tool result>"; `slow` calls `wait_for`, which blocks
until the test creates `release_<input>` in MARKER_DIR, and answers "slow: <result>";
`hidden` is registered but not served over MCP. The server authenticates with the
bearer token "mcp-secret". The LLM is a function of the transcript, so a relaunched
process answers as the killed one would have; every tool execution and LLM call is
appended to a file in MARKER_DIR.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import uvicorn
from app_marks import marker

from helix_dbos import Agent, HelixDBOS, MockLLM, tool
from helix_dbos.orchestration.types import LLMRequest
from helix_dbos.server import bearer_token, create_app

TOKEN = "mcp-secret"
database_url, port, executor_id, marker_dir = sys.argv[1:5]
markers = Path(marker_dir)

mark = marker(markers)


@tool(require_approval=True)
def deploy(target: str) -> str:
    """Deploys; a human approves it first."""
    mark("deploy.log", target)
    return f"deployed {target}"


@tool
async def wait_for(topic: str) -> str:
    """Blocks until the test releases the topic."""
    mark(f"wait_{topic}.log")
    while not (markers / f"release_{topic}").exists():
        await asyncio.sleep(0.05)
    return f"done {topic}"


def respond(request: LLMRequest) -> dict:
    mark(f"llm_{request.agent_name}.log", str(len(request.messages)))
    text = next(str(m.content) for m in request.messages if m.role == "user")
    results = [m for m in request.messages if m.role == "tool"]
    name = request.agent_name
    if name in ("echo", "hidden"):
        return {"type": "text", "content": f"{name}: {text}"}
    if not results:
        tool_name, args = (
            ("deploy", {"target": text}) if name == "deployer" else ("wait_for", {"topic": text})
        )
        return {
            "type": "tool_calls",
            "tool_calls": [{"id": "c1", "name": tool_name, "arguments": args}],
        }
    return {"type": "text", "content": f"{name}: {results[-1].content}"}


helix = HelixDBOS(
    [
        Agent("echo"),
        Agent("deployer", tools=[deploy]),
        Agent("slow", tools=[wait_for]),
        Agent("hidden"),
    ],
    database_url=database_url,
    llm=MockLLM(respond),
    executor_id=executor_id,
    application_version="mcp-server-test",
    worker_lease_seconds=3,
)
app = create_app(helix, authenticate=bearer_token(TOKEN), mcp_agents=["echo", "deployer", "slow"])
uvicorn.run(app, host="127.0.0.1", port=int(port), log_level="warning")
