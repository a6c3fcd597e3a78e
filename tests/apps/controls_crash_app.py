"""A real helix_dbos process whose lead has a usage limit and an input guardrail, for a
crash test (issue 50).

usage: controls_crash_app.py start|recover DATABASE_URL EXECUTOR_ID MARKER_DIR [RUN_ID]

The lead (total_tokens limit 3000) delegates to a worker sub-agent whose first model
call uses 5000 tokens, then waits in a slow tool: the limit is reached while the child
runs, and the child, which checks its ancestors' limits, stops before its second model
call. "start" starts the lead's run and sleeps until the test SIGKILLs it in that tool;
"recover" relaunches under the same executor id, waits for the lead's run to end and
prints it. Every LLM call, tool execution and guardrail check is appended to a file in
MARKER_DIR: the guardrail passed before the kill, so its step must not run again.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from app_marks import marker
from crash_main import LIVE_OR_PAUSED, crash_main

from helix_dbos import (
    Agent,
    GuardrailResult,
    HelixDBOS,
    MockLLM,
    RunInfo,
    UsageLimits,
    sub_agent_tool,
    tool,
)
from helix_dbos.orchestration.types import LLMRequest

mode, database_url, executor_id, marker_dir = sys.argv[1:5]
markers = Path(marker_dir)


mark = marker(markers)


@tool
async def slow() -> str:
    """Blocks in the first life, so the test kills the process mid-call."""
    mark("slow.log")
    if mode == "start":
        mark("in_slow")
        await asyncio.sleep(3600)
    return "slow done"


def usage(tokens: int) -> dict:
    return {"model": "gpt-4o-2024-08-06", "input_tokens": tokens, "output_tokens": 0}


def respond(request: LLMRequest) -> dict:
    mark(f"llm_{request.agent_name}.log", str(len(request.messages)))
    results = [m for m in request.messages if m.role == "tool"]
    if request.agent_name == "lead":
        if not results:
            return {
                "type": "tool_calls",
                "tool_calls": [
                    {"id": "w1", "name": "subagent__worker", "arguments": {"message": "go"}}
                ],
                "usage": usage(100),
            }
        return {"type": "text", "content": "lead done", "usage": usage(100)}
    if not results:
        return {
            "type": "tool_calls",
            "tool_calls": [{"id": "s1", "name": "slow", "arguments": {}}],
            "usage": usage(5000),
        }
    return {"type": "text", "content": "worker done", "usage": usage(100)}


def counted(text: str) -> GuardrailResult:
    mark("guardrail.log", text)
    return GuardrailResult(tripwire=False)


worker = Agent("worker", tools=[slow])
lead = Agent(
    "lead",
    tools=[sub_agent_tool(worker)],
    usage_limits=UsageLimits(total_tokens=3000),
    input_guardrails=[counted],
)
helix = HelixDBOS(
    [lead, worker],
    database_url=database_url,
    llm=MockLLM(respond),
    executor_id=executor_id,
    application_version="controls-crash-test",
    worker_lease_seconds=10,
)
helix.launch()


def stopped(run: RunInfo) -> dict[str, Any]:
    return {"status": run.status, "error": run.error, "stop_reason": run.stop_reason}


crash_main(helix, lead, "delegate", mode=mode, run_id_arg=5, show=stopped, live=LIVE_OR_PAUSED)
