"""A helix worker for the schedule tests: launched, serving until killed.

usage: schedule_app.py DATABASE_URL MARKER_DIR

At start every worker schedules `SCHEDULE_APP_CRON` (env) under the name
`SCHEDULE_APP_NAME` for the agent `SCHEDULE_APP_AGENT` (`ticker` answers at once; `holder`
calls a tool that, at the first firing only, records its pid and run and blocks until the process
is killed), as a program that schedules at every start does (`SCHEDULE_APP_BACKFILL=1`:
with automatic backfill). Prints {"ready": executor}.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from helix_dbos import Agent, HelixDBOS, MockLLM, ToolContext, tool
from helix_dbos.orchestration.types import LLMRequest

database_url, marker_dir = sys.argv[1:3]
markers = Path(marker_dir)


@tool
def hold(ctx: ToolContext) -> str:
    """Blocks at the first firing, until the process is killed."""
    try:
        fd = os.open(markers / "first_hold", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return "held"
    os.write(fd, f"{os.getpid()} {ctx.run_id}".encode())
    os.close(fd)
    time.sleep(3600)
    return "never"


def respond(request: LLMRequest) -> dict[str, Any]:
    last = request.messages[-1]
    if request.agent_name == "holder" and last.role == "user":
        return {"type": "tool_calls", "tool_calls": [{"id": "h", "name": "hold", "arguments": {}}]}
    return {"type": "text", "content": "tock"}


helix = HelixDBOS(
    [Agent("ticker"), Agent("holder", tools=[hold])],
    database_url=database_url,
    llm=MockLLM(respond),
    application_version="schedule-test",
    worker_lease_seconds=4,
)


async def main() -> None:
    helix.launch()
    cron = os.environ.get("SCHEDULE_APP_CRON")
    if cron:
        await helix.schedules.create(
            os.environ.get("SCHEDULE_APP_AGENT", "ticker"),
            cron,
            input="tick",
            name=os.environ["SCHEDULE_APP_NAME"],
            backfill=bool(os.environ.get("SCHEDULE_APP_BACKFILL")),
        )
    executor = helix.lease.identity.executor_id if helix.lease else None
    print(json.dumps({"ready": executor}), flush=True)
    await asyncio.sleep(3600)


asyncio.run(main())
