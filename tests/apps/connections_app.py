"""A helix worker for tests/test_connections.py, on the test's own cluster.

usage: connections_app.py DATABASE_URL MARKER_DIR

It starts a run whose tool holds until the file `release-tool` appears, prints its ids,
then, once `execute-now` appears (the test has taken every free connection), calls
`execute()` and prints how it ended; then it waits for the first run, starts a second
one (connections are free again by then) and prints both outcomes. Each tool execution
and model call is appended to a file in MARKER_DIR, so the test can count them.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from app_marks import marker

from helix_dbos import Agent, DatabaseUnavailableError, HelixDBOS, MockLLM, tool
from helix_dbos.orchestration.types import LLMRequest

database_url, marker_dir = sys.argv[1:3]
markers = Path(marker_dir)


mark = marker(markers)


def say(payload: dict) -> None:
    print(json.dumps(payload), flush=True)


async def appears(name: str) -> None:
    while not (markers / name).exists():
        await asyncio.sleep(0.05)


@tool
async def hold(value: str) -> str:
    """Holds until the test lets it go."""
    mark("hold.log", value)
    await appears("release-tool")
    return f"held:{value}"


def respond(request: LLMRequest) -> dict:
    first = request.messages[0].content if request.messages else ""
    mark("llm.log", f"{first}:{len(request.messages)}")
    if any(m.role == "tool" for m in request.messages):
        return {"type": "text", "content": f"done {first}"}
    call = {"id": f"h-{first}", "name": "hold", "arguments": {"value": str(first)}}
    return {"type": "tool_calls", "tool_calls": [call]}


agent = Agent("conn_agent", tools=[hold])
helix = HelixDBOS(
    [agent],
    database_url=database_url,
    llm=MockLLM(respond),
    pool_size=2,
    connection_timeout_seconds=3,
    application_version="connections-test",
)


async def main() -> None:
    helix.launch()
    first = await helix.execute(agent, "one")
    say({"run_id": first.run_id, "session_id": first.session_id})
    await appears("execute-now")
    try:
        refused = await helix.execute(agent, "refused")
        say({"refused": None, "run_id": refused.run_id})
    except DatabaseUnavailableError as exc:
        say(
            {
                "refused": "DatabaseUnavailableError",
                "message": str(exc),
                "waited": exc.waited_seconds,
            }
        )
    except Exception as exc:  # reported, for the test to show
        say({"refused": type(exc).__name__, "message": str(exc)})
    result = await first.result()
    second = await helix.execute(agent, "two")
    second_result = await second.result()
    say(
        {
            "first": result.status,
            "second": second_result.status,
            "second_run_id": second.run_id,
            "second_session_id": second.session_id,
        }
    )
    await helix.shutdown_async()


asyncio.run(main())
