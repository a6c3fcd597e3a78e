"""A real helix_dbos process with a lead and two researcher sub-agents, for crash tests.

usage: subagent_crash_app.py start|recover DATABASE_URL EXECUTOR_ID MARKER_DIR [RUN_ID]

"start" starts the lead's run and sleeps until the test SIGKILLs it while both children
are inside their slow tool; "recover" relaunches under the same executor id, waits for
the lead's run to end and prints it. The LLM is a function of the transcript, so the
relaunched process answers as the killed one would have; every tool execution and LLM
call is appended to a file in MARKER_DIR for the test to count.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

from helix_dbos import Agent, HelixDBOS, MockLLM, sub_agent_tool, tool
from helix_dbos.orchestration.types import LLMRequest

mode, database_url, executor_id, marker_dir = sys.argv[1:5]
markers = Path(marker_dir)


def mark(name: str, line: str = "x") -> None:
    with open(markers / name, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


@tool
def note(topic: str) -> str:
    """Completes at once (its step must not run again after the crash)."""
    mark(f"note_{topic}.log")
    return f"noted {topic}"


@tool
async def slow(topic: str) -> str:
    """Blocks in the first life, so the test kills the process mid-call."""
    mark(f"slow_{topic}.log")
    if mode == "start":
        mark(f"in_slow_{topic}")
        await asyncio.sleep(3600)
    return f"read about {topic}"


def topic_of(request: LLMRequest) -> str:
    return next(str(m.content) for m in request.messages if m.role == "user")


def respond(request: LLMRequest) -> dict:
    mark(f"llm_{request.agent_name}.log", str(len(request.messages)))
    results = [m for m in request.messages if m.role == "tool"]
    if request.agent_name == "lead":
        if not results:
            return {
                "type": "tool_calls",
                "tool_calls": [
                    {"id": "r1", "name": "subagent__researcher", "arguments": {"message": "owls"}},
                    {"id": "r2", "name": "subagent__researcher", "arguments": {"message": "bats"}},
                ],
            }
        return {"type": "text", "content": " | ".join(str(m.content) for m in results)}
    topic = topic_of(request)
    if len(results) == 0:
        return {
            "type": "tool_calls",
            "tool_calls": [{"id": "n", "name": "note", "arguments": {"topic": topic}}],
        }
    if len(results) == 1:
        return {
            "type": "tool_calls",
            "tool_calls": [{"id": "s", "name": "slow", "arguments": {"topic": topic}}],
        }
    return {"type": "text", "content": f"{topic}: {results[-1].content}"}


researcher = Agent("researcher", tools=[note, slow])
lead = Agent("lead", tools=[sub_agent_tool(researcher)])
helix = HelixDBOS(
    [lead, researcher],
    database_url=database_url,
    llm=MockLLM(respond),
    executor_id=executor_id,
    application_version="subagent-crash-test",
    worker_lease_seconds=4,  # a relaunch under the same id waits for the killed one's lease
)
helix.launch()


async def main() -> None:
    if mode == "start":
        handle = await helix.execute(lead, "research owls and bats")
        print(json.dumps({"run_id": handle.run_id, "session_id": handle.session_id}), flush=True)
        await asyncio.sleep(3600)  # killed by the test before this ends
        return
    run_id = sys.argv[5]
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        run = await helix.get_run(run_id)
        if run.status not in ("running", "waiting", "paused"):
            print(json.dumps({"status": run.status, "output": run.output, "error": run.error}))
            return
        await asyncio.sleep(0.1)
    print(json.dumps({"status": "timeout"}), flush=True)


asyncio.run(main())
helix.shutdown()
