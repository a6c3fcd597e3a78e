"""Runs the same sessions on any helix build (public API only): the test of derived step
checkpoints (migration 0030) runs it on the build before the migration and on this one.

argv: database_url, executor_id, marker_dir, then a mode, which prints one JSON line:
- `start`: a run that waits for approval at its third step and one killed in its second
  step's tool (it blocks in this life); prints their session and run ids. The test kills
  this process once both are at their points.
- `finish`: recovers the killed run (same executor id), approves the waiting one's call,
  and waits for both to end; prints their statuses.
- `write`: a session of two runs, one of them changing the state twice; prints its id.

The model is a function of the transcript, so every build answers alike.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from helix_dbos import Agent, HelixDBOS, MockLLM, ToolContext, tool
from helix_dbos.runtime.loop import slow_head
from helix_dbos.runtime.steps import tool_step

# No head is written early for a slow tool (a tool past 0.1 s on a loaded box): every
# build writes the same checkpoints.
tool_step.LIVE_TOOL_START_SECONDS = 60.0  # type: ignore[misc]
slow_head.LIVE_TOOL_START_SECONDS = 60.0  # type: ignore[misc]

database_url, executor_id, marker_dir, mode = sys.argv[1:5]
markers = Path(marker_dir)


class Counter(BaseModel):
    count: int = 0


@tool
def bump(by: int, ctx: ToolContext) -> int:
    """Add to the counter."""
    ctx.update_state(lambda s: s.model_copy(update={"count": s.count + by}))
    return by


@tool
def look(what: str) -> str:
    """Look at something."""
    return f"saw {what}"


@tool(require_approval=True)
def gated(what: str) -> str:
    """Needs a human's approval."""
    return f"done {what}"


@tool
async def slow(what: str) -> str:
    """Blocks in the first life (killed there), returns at once after."""
    if mode == "start":
        (markers / "in_slow").touch()
        await asyncio.sleep(3600)
    return f"slowly {what}"


SCRIPTS: dict[str, list[tuple[str, dict[str, Any]] | str]] = {
    "count": [("bump", {"by": 2}), ("look", {"what": "sky"}), ("bump", {"by": 3}), "done"],
    "again": [("look", {"what": "sea"}), "fine"],
    "approve": [("bump", {"by": 1}), ("look", {"what": "x"}), ("gated", {"what": "y"}), "ok"],
    "crash": [("look", {"what": "z"}), ("slow", {"what": "w"}), ("bump", {"by": 4}), "lived"],
}


def respond(request: Any) -> dict[str, Any]:
    last_user = max(i for i, m in enumerate(request.messages) if m.role == "user")
    text = request.messages[last_user].content
    answered = sum(1 for m in request.messages[last_user:] if m.role == "assistant")
    move = SCRIPTS[text][answered]
    if isinstance(move, str):
        return {"type": "text", "content": move}
    name, args = move
    call = {"id": f"{text}-{answered}", "name": name, "arguments": args}
    return {"type": "tool_calls", "tool_calls": [call]}


agent = Agent("counter", tools=[bump, look, gated, slow], state_schema=Counter)
helix = HelixDBOS(
    agents=[agent], llm=MockLLM(respond), database_url=database_url, executor_id=executor_id
)


async def start() -> dict[str, Any]:
    waiting = await helix.execute(agent, "approve")
    killed = await helix.execute(agent, "crash")
    return {
        "approve": [waiting.session_id, waiting.run_id],
        "crash": [killed.session_id, killed.run_id],
    }


async def finish() -> dict[str, Any]:
    todo = json.loads((markers / "ids.json").read_text())
    waiting_sid, waiting_rid = todo["approve"]
    await helix.approve(waiting_sid, "approve-2")
    out = {}
    for name, (_, run_id) in todo.items():
        result = await (await helix.get_handle(run_id)).result()
        out[name] = result.status
    return out


async def write() -> str:
    first = await (await helix.execute(agent, "count")).result()
    assert first.status == "completed", first
    second = await (await helix.execute(agent, "again", session_id=first.session_id)).result()
    assert second.status == "completed", second
    return first.session_id


async def main() -> None:
    helix.launch()
    if mode == "start":
        print(json.dumps(await start()), flush=True)
        await asyncio.sleep(3600)  # killed by the test
    elif mode == "finish":
        print(json.dumps(await finish()), flush=True)
    else:
        print(json.dumps(await write()), flush=True)


asyncio.run(main())
helix.shutdown()
