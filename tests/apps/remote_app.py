"""A real helix server process for the remote sub-agent tests (issue 32).

usage: remote_app.py parent|child DATABASE_URL PORT EXECUTOR_ID MARKER_DIR [CHILD_URL]

"child" serves the agent `worker`: it calls its `slow` tool with the topic it was given
(the tool blocks until the test creates `release_<topic>` in MARKER_DIR, unless the topic
starts with "fast"), then answers "<topic>: <tool result>". "parent" serves `lead`, which
delegates its message to `worker` at CHILD_URL and answers "lead got: <result>", and
variants whose tool has a wrong token (`lead_badauth`), names an agent the child does not
serve (`lead_ghost`), or points at a port where nothing listens (`lead_down`), and
`lead_limited`, whose 5-token limit only its remote child's spend can reach. Both
authenticate with the bearer token "remote-secret". The child holds a start request whose
body names a topic beginning with "held" until the test creates `release_start`
(`app_marks.holding_starts`). The LLM is a function of the transcript, so a relaunched
process answers as the killed one would have; every tool execution and LLM call is
appended to a file in MARKER_DIR.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import uvicorn
from app_marks import holding_starts, marker
from scripted import call

from helix_dbos import Agent, HelixDBOS, MockLLM, UsageLimits, remote_sub_agent_tool, tool
from helix_dbos.orchestration.types import LLMRequest
from helix_dbos.server import bearer_token, create_app

TOKEN = "remote-secret"
role, database_url, port, executor_id, marker_dir = sys.argv[1:6]
child_url = sys.argv[6] if len(sys.argv) > 6 else "http://127.0.0.1:9"
markers = Path(marker_dir)


mark = marker(markers)


@tool
async def slow(topic: str) -> str:
    """Blocks until the test releases the topic."""
    mark(f"slow_{topic}.log")
    while not topic.startswith("fast") and not (markers / f"release_{topic}").exists():
        await asyncio.sleep(0.05)
    return f"read about {topic}"


def respond(request: LLMRequest) -> dict:
    mark(f"llm_{request.agent_name}.log", str(len(request.messages)))
    topic = next(str(m.content) for m in request.messages if m.role == "user")
    results = [m for m in request.messages if m.role == "tool"]
    if request.agent_name == "worker":
        if not results:
            return call("s", "slow", {"topic": topic})
        return {
            "type": "text",
            "content": f"{topic}: {results[-1].content}",
            "usage": {"input_tokens": 7, "output_tokens": 3},
        }
    if request.agent_name == "lead_fanout" and not results:
        calls = [
            {"id": f"r{i}", "name": "subagent__worker", "arguments": {"message": f"{topic}-{i}"}}
            for i in (1, 2)
        ]
        return {"type": "tool_calls", "tool_calls": calls}
    if request.agent_name == "lead_limited" and not results:
        return {**call("r1", "subagent__worker", {"message": topic}), "usage": PARENT_USAGE}
    if not results:
        return call("r1", "subagent__worker", {"message": topic})
    return {"type": "text", "content": "lead got: " + " | ".join(str(m.content) for m in results)}


PARENT_USAGE = {"input_tokens": 1, "output_tokens": 1}


def lead(
    name: str,
    url: str,
    token: str,
    agent_name: str = "worker",
    attempts: int = 3,
    limits: UsageLimits | None = None,
) -> Agent:
    remote = remote_sub_agent_tool(
        url,
        agent_name,
        auth=token,
        name="worker",
        max_attempts=attempts,
        retry_interval_seconds=0.2,
    )
    return Agent(name, tools=[remote], usage_limits=limits)


if role == "child":
    agents = [Agent("worker", tools=[slow])]
else:
    agents = [
        lead("lead", child_url, TOKEN),
        lead("lead_badauth", child_url, "not-the-token"),
        lead("lead_ghost", child_url, TOKEN, agent_name="ghost"),
        lead("lead_down", "http://127.0.0.1:9", TOKEN),
        lead("lead_patient", child_url, TOKEN, attempts=12),
        lead("lead_fanout", child_url, TOKEN),
        lead("lead_limited", child_url, TOKEN, limits=UsageLimits(total_tokens=5)),
    ]
helix = HelixDBOS(
    agents,
    database_url=database_url,
    llm=MockLLM(respond),
    executor_id=executor_id,
    application_version=f"remote-test-{role}",
    worker_lease_seconds=3,
)
app = create_app(helix, authenticate=bearer_token(TOKEN))


uvicorn.run(
    holding_starts(app, markers) if role == "child" else app,
    host="127.0.0.1",
    port=int(port),
    log_level="warning",
)
