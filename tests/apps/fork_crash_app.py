"""A real helix_dbos process for the fork crash test (issue 30): started, SIGKILLed
during a fork's first run, relaunched.

usage: fork_crash_app.py start|recover DATABASE_URL EXECUTOR_ID MARKER_DIR [RUN_ID]

"start" runs a source session to completion (one `record` call, then an answer), forks
it at its first checkpoint with the state {"branch": "fork"}, resumes the fork (printing
the ids) and blocks in the fork's `slow` call until the test kills it. "recover"
relaunches under the same executor id and prints how the fork's run ended. The LLM is a
function of the transcript and the system prompt (which names the branch), so both lives
answer alike.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from app_marks import marker

from helix_dbos import Agent, HelixDBOS, MockLLM, tool
from helix_dbos.orchestration.types import LLMRequest

mode, database_url, executor_id, marker_dir = sys.argv[1:5]
markers = Path(marker_dir)


mark = marker(markers)


@tool
def record(value: str) -> str:
    """Completes at once."""
    mark("record.log", value)
    return f"recorded {value}"


@tool
async def slow(value: str) -> str:
    """Blocks in the first life, so the test can kill the process mid-call."""
    mark("slow.log", value)
    if mode == "start":
        mark("in_slow")
        await asyncio.sleep(3600)
    return f"slow {value}"


def respond(request: LLMRequest) -> dict:
    branch = "fork" if "branch fork" in (request.system or "") else "main"
    mark("llm.log", f"{branch} {len(request.messages)}")
    steps = len([m for m in request.messages if m.role == "assistant"])
    if steps == 0:
        return {"type": "tool_calls", "tool_calls": [
            {"id": "r1", "name": "record", "arguments": {"value": "one"}}
        ]}  # fmt: skip
    if branch == "fork" and steps == 1:
        return {"type": "tool_calls", "tool_calls": [
            {"id": "s1", "name": "slow", "arguments": {"value": "two"}}
        ]}  # fmt: skip
    return {"type": "text", "content": f"{branch} done after {steps} steps"}


agent = Agent(
    "fork_crash_agent",
    system_prompt=lambda state: f"branch {state.get('branch', 'main')}",
    tools=[record, slow],
)
helix = HelixDBOS(
    [agent],
    database_url=database_url,
    llm=MockLLM(respond),
    executor_id=executor_id,
    application_version="fork-crash-test",
    worker_lease_seconds=4,
)
helix.launch()


def say(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


async def main() -> None:
    if mode == "start":
        source = await (await helix.execute(agent, "go")).result()
        first = (await helix.checkpoints.list(source.session_id))[0]
        fork = await helix.checkpoints.fork(source.session_id, at=first, state={"branch": "fork"})
        handle = await helix.resume(fork)
        say(source=source.session_id, output=source.output, fork=fork, run_id=handle.run_id)
        await asyncio.sleep(3600)  # killed by the test
    else:
        handle = await helix.get_handle(sys.argv[5])
        result = await handle.result()
        say(status=result.status, output=result.output, error=result.error)


asyncio.run(main())
helix.shutdown()
