"""A process whose triage agent hands off to billing, for crash tests.

usage: handoff_crash_app.py start|recover DATABASE_URL EXECUTOR_ID MARKER_DIR KILL_AT [RUN_ID]

Triage's model calls `lookup` and `transfer_to_handoff_billing` in one reply; billing's
answers. Each model call appends its agent's name to `llm.log` in MARKER_DIR, each
`lookup` to `tool.log`. In `start`, KILL_AT `tool` SIGKILLs the process in `lookup` (the
reply is checkpointed, the handoff row is not written), `target` in billing's first model
call (the handoff row is written, the target's first step is not checkpointed).
`recover` relaunches under the same executor id and prints how the run ended.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

from helix_dbos import Agent, HelixDBOS, MockLLM, tool
from helix_dbos.orchestration.types import LLMRequest

mode, database_url, executor_id, marker_dir, kill_at = sys.argv[1:6]
markers = Path(marker_dir)


def mark(name: str, line: str) -> None:
    with open(markers / name, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def reply(request: LLMRequest) -> dict:
    mark("llm.log", request.agent_name)
    if request.agent_name == "handoff_billing":
        if mode == "start" and kill_at == "target":
            os.kill(os.getpid(), signal.SIGKILL)
        return {"type": "text", "content": "You owe 10 EUR."}
    calls = [
        {"id": "look", "name": "lookup", "arguments": {"order": "42"}},
        {"id": "hand", "name": "transfer_to_handoff_billing", "arguments": {}},
    ]
    return {"type": "tool_calls", "tool_calls": calls}


@tool
def lookup(order: str) -> str:
    """Look an order up."""
    mark("tool.log", order)
    if mode == "start" and kill_at == "tool":
        os.kill(os.getpid(), signal.SIGKILL)
    return f"order {order}: unpaid"


billing = Agent("handoff_billing", system_prompt="You are billing.")
triage = Agent("handoff_triage", tools=[lookup], handoffs=[billing])
llm = MockLLM()
llm.set_responder(reply)
helix = HelixDBOS(
    [triage, billing],
    database_url=database_url,
    llm=llm,
    executor_id=executor_id,
    application_version="handoff-crash-test",
    worker_lease_seconds=4,
)
helix.launch()


async def main() -> None:
    if mode == "start":
        handle = await helix.execute(triage, "What do I owe?")
        print(json.dumps({"run_id": handle.run_id, "session_id": handle.session_id}), flush=True)
        await asyncio.sleep(3600)  # killed before this ends
        return
    run_id = sys.argv[6]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        run = await helix.get_run(run_id)
        if run.status not in ("running", "waiting"):
            session = await helix.get_session(run.session_id)
            outcome = {"status": run.status, "output": run.output, "error": run.error}
            print(json.dumps({**outcome, "current_agent": session.current_agent}))
            return
        await asyncio.sleep(0.1)
    print(json.dumps({"status": "timeout"}), flush=True)


asyncio.run(main())
helix.shutdown()
