"""The release test's application (tests/test_release_upgrade.py): the same file runs on
the previous release's code (`start`) and on the working tree's (`finish`), on one
database.

usage: release_app.py start|finish DATABASE_URL PORT MARKER_DIR

It uses only the public API of both releases, and helix's defaults for the application
name, version and executor id, as a user's program upgraded in place would. It serves
the helix HTTP API on PORT (the remote sub-agent's server is this process itself).

start: begins every scenario, prints one JSON line {"code": <helix_dbos path>, "ids":
{...}} once each was started (the test polls SQL until each is at its point, then
SIGKILLs the process). Tools and model calls that would end a scenario block in this life.
finish: reads MARKER_DIR/answers.json (the calls to approve, the session to continue,
the schedule to fire again), does that, prints {"code", "continued", "fired"} and serves
until terminated.

The LLM is a function of the transcript, so the new code answers as the old would have.
Every tool execution and model call is appended to a file in MARKER_DIR with the life it
happened in, for the test to count.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import uvicorn

import helix_dbos
from helix_dbos import (
    Agent,
    HelixDBOS,
    LLMConfig,
    MockLLM,
    remote_sub_agent_tool,
    sub_agent_tool,
    tool,
)
from helix_dbos.server import create_app

mode, database_url, port, marker_dir = sys.argv[1:5]
markers = Path(marker_dir)
OLD_LIFE = mode == "start"
SLOT_MODEL = "mock:release-slot"
SCHEDULE = "release-ticker"


def mark(name: str, line: str) -> None:
    with open(markers / name, "a") as f:
        f.write(f"{mode} {line}\n")
        f.flush()
        os.fsync(f.fileno())


async def block_in_old_life(where: str) -> None:
    """The old code is killed here; the new code goes on."""
    if OLD_LIFE:
        (markers / f"in_{where}").touch()
        await asyncio.sleep(3600)


@tool(require_approval=True)
def guarded(path: str) -> str:
    """Needs a human's approval."""
    mark("guarded.log", path)
    return f"wrote {path}"


@tool
def record(value: str) -> str:
    """Completes at once."""
    mark("record.log", value)
    return f"recorded {value}"


@tool
async def slow(value: str) -> str:
    """Still running when the old code is killed."""
    mark("slow.log", value)
    await block_in_old_life(f"slow_{value}")
    return f"slow {value}"


# Each agent's tool calls, step by step; then a text reply naming what it saw.
PLANS: dict[str, list[list[tuple[str, str, dict[str, Any]]]]] = {
    "approver": [[("a1", "guarded", {"path": "/approved"})]],
    "parker": [[("p1", "guarded", {"path": "/parked"})]],
    "toolman": [[("t1", "record", {"value": "one"})], [("t2", "slow", {"value": "two"})]],
    "gated_child": [[("c1", "guarded", {"path": "/child"})]],
    "delegator": [[("s1", "subagent__gated_child", {"message": "ask"})]],
    "texter": [[("h1", "slow", {"value": "texter"})]],
    "remote_lead": [[("r1", "subagent__remote", {"message": "fetch"})]],
    "remote_worker": [[("w1", "slow", {"value": "remote"})]],
    "ticker": [[("k1", "slow", {"value": "tick"})]],
}


async def respond(request: Any) -> dict[str, Any]:
    agent = request.agent_name
    said = next(str(m.content) for m in reversed(request.messages) if m.role == "user")
    mark(f"llm_{agent}.log", said)
    if agent == "slotted" and said == "hold the slot":
        await block_in_old_life("slot_call")
    plan = PLANS.get(agent, []) if said != "second" else []
    step = len([m for m in request.messages if m.role == "assistant" and m.tool_calls])
    if step < len(plan):
        calls = [{"id": i, "name": n, "arguments": a} for i, n, a in plan[step]]
        return {"type": "tool_calls", "tool_calls": calls}
    results = [str(m.content) for m in request.messages if m.role == "tool"]
    users = [str(m.content) for m in request.messages if m.role == "user"]
    return {"type": "text", "content": f"{agent}: {' | '.join(users + results)}"}


class Parked(logging.Handler):
    """The `run.parked` log event, as a marker (the parked scenario's point)."""

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "event", None) == "run.parked":
            mark("parked.log", str(getattr(record, "workflow_id", "")))


logging.getLogger("helix_dbos").addHandler(Parked(logging.INFO))
logging.getLogger("helix_dbos").setLevel(logging.INFO)

gated_child = Agent("gated_child", tools=[guarded])
remote_worker = Agent("remote_worker", tools=[slow])
agents = [
    Agent("approver", tools=[guarded]),
    Agent("parker", tools=[guarded]),
    Agent("toolman", tools=[record, slow]),
    gated_child,
    Agent("delegator", tools=[sub_agent_tool(gated_child)]),
    Agent("slotted", llm=LLMConfig(model=SLOT_MODEL, max_concurrent=1)),
    Agent("texter", tools=[slow]),
    remote_worker,
    Agent(
        "remote_lead",
        tools=[
            remote_sub_agent_tool(
                f"http://127.0.0.1:{port}",
                "remote_worker",
                auth=None,
                name="remote",
                max_attempts=30,
                retry_interval_seconds=0.5,
            )
        ],
    ),
    Agent("ticker", tools=[slow]),
    Agent("chatter"),
]
by_name = {a.name: a for a in agents}
helix = HelixDBOS(
    agents,
    database_url=database_url,
    llm=MockLLM(respond),
    worker_lease_seconds=4,
    # The parked scenario's wait is the oldest of three: beyond two, it is parked.
    waiting_runs_in_memory=2,
)


async def until_pending(session_id: str) -> None:
    while not await helix.pending_tool_calls(session_id):
        await asyncio.sleep(0.05)


async def until_marked(name: str) -> None:
    while not (markers / name).exists():
        await asyncio.sleep(0.05)


async def start() -> dict[str, Any]:
    ids: dict[str, Any] = {}

    async def run(key: str, agent: str, text: str, **kwargs: Any) -> Any:
        handle = await helix.execute(by_name[agent], text, **kwargs)
        ids[key] = {"session_id": handle.session_id, "run_id": handle.run_id}
        return handle

    parked = await run("parked", "parker", "park it")  # the oldest wait
    await until_pending(parked.session_id)
    await run("approval", "approver", "approve it")
    await run("slow_tool", "toolman", "work")
    await run("child_approval", "delegator", "delegate")
    await run("slot_holder", "slotted", "hold the slot")
    await until_marked("in_slot_call")
    await run("slot_waiter", "slotted", "wait for the slot")
    first = await run("double_text", "texter", "first")
    await until_marked("in_slow_texter")
    queued = await helix.execute(
        by_name["texter"], "second", session_id=first.session_id, multitask_strategy="enqueue"
    )
    ids["double_text"]["message_id"] = queued.message_id
    await run("remote", "remote_lead", "go remote")
    continued = await run("continued", "chatter", "hello")
    await continued.result()
    await helix.schedule("ticker", "0 0 1 1 *", input="tick", name=SCHEDULE)
    ids["firing"] = {"firing_id": await helix.trigger_schedule(SCHEDULE)}
    return {"ids": ids}


async def finish() -> dict[str, Any]:
    todo = json.loads((markers / "answers.json").read_text())
    approved = []
    for session_id in todo["approve_in"]:
        for call in await helix.pending_tool_calls(session_id):
            await helix.approve(call.session_id or session_id, call.tool_call_id)
            approved.append(call.tool_call_id)
    continued = await helix.execute(
        by_name["chatter"], "again", session_id=todo["continue_session"]
    )
    fired = await helix.trigger_schedule(SCHEDULE)
    return {"approved": approved, "continued": continued.run_id, "fired": fired}


async def main() -> None:
    helix.launch()
    app = create_app(helix, allow_unauthenticated=True)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=int(port), log_level="warning")
    )
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.02)
    out = await (start() if OLD_LIFE else finish())
    print(json.dumps({"code": helix_dbos.__file__, **out}), flush=True)
    await serving  # until killed (start) or terminated (finish)


asyncio.run(main())
helix.shutdown()
