"""A real helix_dbos process with a lead and two researcher sub-agents, for crash tests.

usage: subagent_crash_app.py start|recover DATABASE_URL EXECUTOR_ID MARKER_DIR SCENARIO [RUN_ID]

"start" starts the lead's run and sleeps until the test SIGKILLs it; "recover" relaunches
under the same executor id, waits for the lead's run to end and prints it. Scenarios:
"children": the lead fans out to two researchers (and to an unregistered "ghost", a
dispatch failure), killed while both researchers are in their slow tool; its tool hooks
and each `subagent.dispatch_failed` log event are counted in marker files; "companion": the lead spawns a non-blocking persistent critic, then sends it a
message while it is in its slow tool, killed while the lead waits for it to stop;
"companion_ghost": the lead spawns an unregistered companion (a dispatch failure), then
is killed in its own slow tool. The LLM is a function of the transcript, so the
relaunched process answers as the killed one would have; every tool execution and LLM
call is appended to a file in MARKER_DIR for the test to count.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path

from app_marks import marker
from crash_main import LIVE_OR_PAUSED, crash_main
from scripted import call

from helix_dbos import (
    Agent,
    AgentHooks,
    HelixDBOS,
    MockLLM,
    PersistentAgent,
    sub_agent_tool,
    tool,
)
from helix_dbos.orchestration.types import LLMRequest

mode, database_url, executor_id, marker_dir, scenario = sys.argv[1:6]
markers = Path(marker_dir)


mark = marker(markers)


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


@tool
async def wait_for_critic(session_id: str) -> str:
    """The lead waits until its critic's session has completed."""
    while (await helix.get_session(session_id)).status != "completed":
        await asyncio.sleep(0.05)
    return "critic done"


def companion_lead(request: LLMRequest, results: list) -> dict:
    """spawn the critic (non-blocking), message it while it works, wait, then report."""
    if not results:
        return call(
            "c1", "companion__spawnAgent", {"agentType": "critic", "message": "v1", "name": "c"}
        )
    if len(results) == 1:
        return call("c2", "companion__sendMessage", {"name": "c", "message": "v2"})
    if len(results) == 2:
        session = json.loads(str(results[0].content))["session_id"]
        return call("w", "wait_for_critic", {"session_id": session})
    notices = [str(m.content) for m in request.messages if str(m.content).startswith("[companion")]
    return {"type": "text", "content": " | ".join(notices)}


def critic_reply(request: LLMRequest, results: list) -> dict:
    message = [m for m in request.messages if m.role == "user"][-1].content
    if message == "v1":
        return call("s", "slow", {"topic": "v1"})
    return {"type": "text", "content": f"approved {message}"}


def ghost_lead(results: list) -> dict:
    """spawn the unregistered ghost companion, then wait in the slow tool, then report."""
    if not results:
        return call("g0", "companion__spawnAgent", {"agentType": "ghost", "message": "boo"})
    if len(results) == 1:
        return call("s", "slow", {"topic": "lead"})
    return {"type": "text", "content": str(results[0].content)}


def respond(request: LLMRequest) -> dict:
    mark(f"llm_{request.agent_name}.log", str(len(request.messages)))
    results = [m for m in request.messages if m.role == "tool"]
    if request.agent_name == "critic":
        return critic_reply(request, results)
    if request.agent_name == "lead" and scenario == "companion_ghost":
        return ghost_lead(results)
    if request.agent_name == "lead" and scenario == "companion":
        return companion_lead(request, results)
    if request.agent_name == "lead":
        if not results:
            return {
                "type": "tool_calls",
                "tool_calls": [
                    {"id": "r0", "name": "subagent__ghost", "arguments": {"message": "boo"}},
                    {"id": "r1", "name": "subagent__researcher", "arguments": {"message": "owls"}},
                    {"id": "r2", "name": "subagent__researcher", "arguments": {"message": "bats"}},
                ],
            }
        answers = [str(m.content) for m in results if m.tool_call_id != "r0"]
        return {"type": "text", "content": " | ".join(answers)}
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


class DispatchFailures(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "event", None) == "subagent.dispatch_failed":
            mark("dispatch_failed.log", str(getattr(record, "tool_call_id", "")))


logging.getLogger("helix_dbos").addHandler(DispatchFailures(logging.ERROR))

lead_hooks = AgentHooks(  # the lead's tool hooks, counted per call
    before_tool=lambda e: mark(f"before_tool_{e.call.id}.log"),
    after_tool=lambda e: mark(f"after_tool_{e.call.id}.log", str(e.success)),
    on_message=lambda e: (
        mark(f"on_message_{e.message.tool_call_id}.log") if e.message.role == "tool" else None
    ),
)
researcher = Agent("researcher", tools=[note, slow])
critic = Agent("critic", tools=[slow])
ghost = Agent("ghost")  # never registered: its calls cannot be dispatched
lead = Agent(
    "lead",
    tools=[sub_agent_tool(researcher), sub_agent_tool(ghost), wait_for_critic, slow],
    persistent_agents=[
        PersistentAgent(critic, mode="non_blocking"),
        PersistentAgent(ghost, mode="non_blocking"),
    ],
    hooks=lead_hooks,
)
helix = HelixDBOS(
    [lead, researcher, critic],
    database_url=database_url,
    llm=MockLLM(respond),
    executor_id=executor_id,
    application_version="subagent-crash-test",
    # A relaunch under the same id waits for the killed one's lease; long enough that a
    # loaded machine (other test runs on 2 cores) does not fence a live worker.
    worker_lease_seconds=10,
)
helix.launch()


crash_main(helix, lead, "research owls and bats", mode=mode, run_id_arg=6, live=LIVE_OR_PAUSED)
