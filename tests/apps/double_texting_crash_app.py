"""A real helix_dbos process for the double-texting crash tests: started, SIGKILLed,
relaunched.

usage: double_texting_crash_app.py start|recover DATABASE_URL EXECUTOR_ID SCENARIO MARKER_DIR

start: runs a session's first run and sends it messages (as SCENARIO says), printing
{"session_id", "run_id", "messages": [...]} once they are stored; the test kills it
(or it kills itself at the scenario's point). recover: relaunches under the same
executor id, waits for the first run and every message's run, and prints their
outcomes. The LLM is a function of the transcript, and every tool execution and LLM
call is appended to a file in MARKER_DIR.

Scenarios:
- stored: the first run blocks in a tool; two `enqueue` messages are stored; killed.
- opening: the first run ends while a message waits; the process dies after the ending
  workflow opened the message's run, before its workflow started.
- rollback: the first run commits a step (a state change) and blocks; a `rollback`
  message aborts it; the process dies before the rollback's transaction.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from app_marks import marker

from helix_dbos import Agent, HelixDBOS, MockLLM, ToolContext, tool
from helix_dbos.orchestration.types import LLMRequest
from helix_dbos.runtime.sessions.session_queue import QueuedRunHandle

mode, database_url, executor_id, scenario, marker_dir = sys.argv[1:6]
markers = Path(marker_dir)
first_life = mode == "start"


mark = marker(markers)


def die(why: str) -> None:
    mark(why)
    os.kill(os.getpid(), signal.SIGKILL)


@tool
async def hold(ctx: ToolContext) -> str:
    """Blocks for good in the first life (the test kills the process meanwhile)."""
    mark("hold.log")
    ctx.update_state({"held": True})
    if first_life:
        mark("in_hold")
        await asyncio.sleep(3600)
    return "held"


@tool
async def pause() -> str:
    """A second long: messages arrive while it runs."""
    mark("pause.log")
    mark("in_pause")
    await asyncio.sleep(1.5)
    return "paused"


@tool
def bump(ctx: ToolContext) -> str:
    """Changes the state (a rolled-back run's change must go)."""
    mark("bump.log")
    ctx.update_state({"bumped": True})
    return "bumped"


def respond(request: LLMRequest) -> dict:
    said = next(m.content or "" for m in reversed(request.messages) if m.role == "user")
    mark("llm.log", said)
    done = {m.tool_name for m in request.messages if m.role == "tool"}
    plan = {"stored": ["hold"], "opening": ["pause"], "rollback": ["bump", "hold"]}[scenario]
    if said == "first":
        todo = [t for t in plan if t not in done]
        if todo:
            call = {"id": f"c_{todo[0]}", "name": todo[0], "arguments": {}}
            return {"type": "tool_calls", "tool_calls": [call]}
    return {"type": "text", "content": f"re: {said}"}


agent = Agent("dt_crash_agent", tools=[hold, pause, bump])
helix = HelixDBOS(
    [agent],
    database_url=database_url,
    llm=MockLLM(respond),
    executor_id=executor_id,
    application_version="dt-crash-test",
    reconcile_seconds=1.0,
    worker_lease_seconds=4.0,
)

if scenario == "opening" and first_life:
    from dbos import DBOS as _DBOS

    _start = _DBOS.start_workflow_async
    starts = 0

    async def start_then_die(func, *args, **kwargs):  # type: ignore[no-untyped-def]
        global starts
        starts += 1
        if starts == 2:  # the message's run: opened (its row committed), not started
            die("opened_queued_run")
        return await _start(func, *args, **kwargs)

    _DBOS.start_workflow_async = start_then_die  # type: ignore[method-assign]

if scenario == "rollback" and first_life:
    from helix_dbos.store import rollback as rollback_sql

    async def roll_back_then_die(*args, **kwargs):  # type: ignore[no-untyped-def]
        die("in_rollback")

    rollback_sql.roll_back_run = roll_back_then_die  # type: ignore[assignment]

helix.launch()


async def wait_marker(name: str) -> None:
    while not (markers / name).exists():
        await asyncio.sleep(0.02)


async def start() -> None:
    handle = await helix.execute(agent, "first")
    mark("ids", json.dumps({"session_id": handle.session_id, "run_id": handle.run_id}))
    await wait_marker("in_pause" if scenario == "opening" else "in_hold")
    strategy = "rollback" if scenario == "rollback" else "enqueue"
    texts = ["second", "third"] if scenario == "stored" else ["second"]
    sent = []
    for text in texts:
        if scenario == "rollback":  # printed before it is sent: the send dies midway
            mark("sending")
        queued = await helix.execute(
            agent, text, session_id=handle.session_id, multitask_strategy=strategy
        )
        assert isinstance(queued, QueuedRunHandle), queued
        sent.append(queued.message_id)
    out = {"session_id": handle.session_id, "run_id": handle.run_id, "messages": sent}
    print(json.dumps(out), flush=True)
    await asyncio.sleep(3600)  # the test kills it, or the scenario does


async def recover() -> None:
    session_id, run_id = sys.argv[6], sys.argv[7]
    first = await helix.get_handle(run_id)
    outcomes = {"first": (await first.result()).status}
    rows = await helix.queued_messages(session_id)
    for row in rows:
        queued = await helix.get_queued_handle(session_id, row.message_id)
        result = await asyncio.wait_for(queued.result(), timeout=60)
        outcomes[row.content or ""] = result.status
    print(json.dumps(outcomes), flush=True)


asyncio.run(start() if first_life else recover())
helix.shutdown()
