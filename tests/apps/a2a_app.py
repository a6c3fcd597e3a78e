"""A real helix server process for the A2A tests (issue 33).

usage: a2a_app.py DATABASE_URL PORT EXECUTOR_ID MARKER_DIR [CHILD_URL]

Agents: `echo` answers "echo: <message>"; `reader` calls its `slow` tool with the
message (the tool blocks until the test creates `release_<topic>` in MARKER_DIR unless
the topic starts with "fast") and answers "<topic>: <tool result>"; `guarded` calls
`delete_file`, which needs an approval, and answers with its result or the denial;
`lead` delegates its message to the A2A agent `reader` at CHILD_URL
(`remote_sub_agent_tool(..., protocol="a2a")`) and answers "lead got: <result>".
The server authenticates with the bearer token "a2a-secret", and holds an A2A request
naming a "held" topic until the test releases it (`app_marks.holding_starts`). The LLM
is a function of the transcript, so a relaunched process answers as the killed one would
have; every tool execution and LLM call is appended to a file in MARKER_DIR.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import uvicorn
from app_marks import holding_starts, marker
from scripted import call

from helix_dbos import Agent, HelixDBOS, MockLLM, remote_sub_agent_tool, tool
from helix_dbos.orchestration.types import LLMRequest
from helix_dbos.server import bearer_token, create_app

TOKEN = "a2a-secret"
database_url, port, executor_id, marker_dir = sys.argv[1:5]
child_url = sys.argv[5] if len(sys.argv) > 5 else "http://127.0.0.1:9/a2a/reader"
markers = Path(marker_dir)

mark = marker(markers)


@tool
async def slow(topic: str) -> str:
    """Read about a topic (slowly)."""
    mark(f"slow_{topic}.log")
    while not topic.startswith("fast") and not (markers / f"release_{topic}").exists():
        await asyncio.sleep(0.05)
    return f"read about {topic}"


@tool(require_approval=True)
async def delete_file(path: str) -> str:
    """Delete a file (a human approves first)."""
    mark("delete.log", path)
    return f"deleted {path}"


def respond(request: LLMRequest) -> dict:
    mark(f"llm_{request.agent_name}.log", str(len(request.messages)))
    topic = next(str(m.content) for m in reversed(request.messages) if m.role == "user")
    results = [m for m in request.messages if m.role == "tool"]
    usage = {"input_tokens": 7, "output_tokens": 3}
    if request.agent_name == "echo":
        return {"type": "text", "content": f"echo: {topic}", "usage": usage}
    if request.agent_name == "reader":
        if not results:
            return call("s1", "slow", {"topic": topic})
        return {"type": "text", "content": f"{topic}: {results[-1].content}", "usage": usage}
    if request.agent_name == "guarded":
        if not results:
            return call("d1", "delete_file", {"path": topic})
        return {"type": "text", "content": f"guarded: {results[-1].content}", "usage": usage}
    if not results:
        return call("r1", "subagent__reader", {"message": topic})
    return {"type": "text", "content": "lead got: " + " | ".join(str(m.content) for m in results)}


agents = [
    Agent("echo", system_prompt="Repeats what it is told.\n\nNothing more."),
    Agent("reader", system_prompt="Reads about a topic.", tools=[slow]),
    Agent("guarded", system_prompt="Deletes files, with approval.", tools=[delete_file]),
    Agent(
        "lead",
        system_prompt="Delegates reading to an A2A agent.",
        tools=[
            remote_sub_agent_tool(
                child_url,
                "reader",
                auth=TOKEN,
                protocol="a2a",
                max_attempts=12,
                retry_interval_seconds=0.2,
            )
        ],
    ),
]
helix = HelixDBOS(
    agents,
    database_url=database_url,
    llm=MockLLM(respond),
    executor_id=executor_id,
    application_version="a2a-test",
    worker_lease_seconds=3,
)
app = create_app(helix, authenticate=bearer_token(TOKEN))
uvicorn.run(
    holding_starts(app, markers, "/a2a/"), host="127.0.0.1", port=int(port), log_level="warning"
)
