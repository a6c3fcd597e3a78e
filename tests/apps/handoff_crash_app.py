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

import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from app_marks import marker
from crash_main import crash_main, kill_once_printed, kill_once_printed_async, outcome

from helix_dbos import Agent, HelixDBOS, MockLLM, RunInfo, tool
from helix_dbos.orchestration.types import LLMRequest

mode, database_url, executor_id, marker_dir, kill_at = sys.argv[1:6]
markers = Path(marker_dir)


mark = marker(markers)


def reply(request: LLMRequest) -> dict | Coroutine[Any, Any, None]:
    mark("llm.log", request.agent_name)
    if request.agent_name == "handoff_billing":
        if mode == "start" and kill_at == "target":
            return kill_once_printed_async()  # awaited by MockLLM
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
        kill_once_printed()
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


async def with_agent(run: RunInfo) -> dict[str, Any]:
    session = await helix.get_session(run.session_id)
    return {**outcome(run), "current_agent": session.current_agent}


crash_main(helix, triage, "What do I owe?", mode=mode, run_id_arg=6, show=with_agent, seconds=60)
