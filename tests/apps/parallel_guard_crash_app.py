"""A real helix_dbos process whose agent has an input guardrail that runs in parallel
with its first model call, for a crash test (issue 50).

usage: parallel_guard_crash_app.py start|recover DATABASE_URL EXECUTOR_ID MARKER_DIR [RUN_ID]

"start" starts the run; its guardrail check blocks (the test SIGKILLs the process once
the LLM step is checkpointed). "recover" relaunches under the same executor id, where
the check trips; it waits for the run to end and prints it. Every LLM call, tool
execution and check is appended to a file in MARKER_DIR.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from app_marks import marker
from crash_main import LIVE_OR_PAUSED, crash_main

from helix_dbos import Agent, GuardrailResult, HelixDBOS, MockLLM, RunInfo, input_guardrail, tool
from helix_dbos.orchestration.types import LLMRequest

mode, database_url, executor_id, marker_dir = sys.argv[1:5]
markers = Path(marker_dir)


mark = marker(markers)


@tool
def act() -> str:
    """Must never run: the guardrail trips."""
    mark("tool.log")
    return "acted"


def respond(request: LLMRequest) -> dict:
    mark("llm.log", str(len(request.messages)))
    return {"type": "tool_calls", "tool_calls": [{"id": "a1", "name": "act", "arguments": {}}]}


@input_guardrail(run_in_parallel=True)
async def moderated(text: str) -> GuardrailResult:
    mark("guardrail.log", mode)
    if mode == "start":
        mark("in_guard")
        await asyncio.sleep(3600)  # killed by the test while the check runs
    return GuardrailResult(tripwire=True, reason="decided after the relaunch")


agent = Agent("guarded", tools=[act], input_guardrails=[moderated])
helix = HelixDBOS(
    [agent],
    database_url=database_url,
    llm=MockLLM(respond),
    executor_id=executor_id,
    application_version="parallel-guard-crash-test",
    worker_lease_seconds=10,
)
helix.launch()


def stopped(run: RunInfo) -> dict[str, Any]:
    return {"status": run.status, "error": run.error, "stop_reason": run.stop_reason}


crash_main(helix, agent, "act", mode=mode, run_id_arg=5, show=stopped, live=LIVE_OR_PAUSED)
