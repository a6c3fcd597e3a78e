"""A real helix server process for the AG-UI tests (tests/test_ag_ui.py).

usage: ag_ui_app.py DATABASE_URL PORT EXECUTOR_ID MARKER_DIR LIFE

Serves the agent `assistant` with the bearer token "ag-ui-secret". The LLM is a function
of the transcript (so a relaunched process answers as the killed one would have):
"hello" is answered with text; "weather in X" calls `lookup`; "pay N" calls `transfer`
(approval-gated); "pick a color" calls the front end's `pick_color`; "gate" calls `gate`,
which waits for `release` in MARKER_DIR; "crash" calls `lookup`, then in LIFE "first" the
next model call hangs (the test SIGKILLs the process there). Every tool execution and
LLM call is appended to a file in MARKER_DIR.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import scripted
import uvicorn
from app_marks import marker

from helix_dbos import Agent, HelixDBOS, MockLLM, tool
from helix_dbos.orchestration.types import LLMRequest
from helix_dbos.server import bearer_token, create_app

TOKEN = "ag-ui-secret"
database_url, port, executor_id, marker_dir, life = sys.argv[1:6]
markers = Path(marker_dir)

mark = marker(markers)


@tool
def lookup(city: str) -> str:
    """The weather in a city."""
    mark("lookup.log", city)
    return f"sunny in {city}"


@tool(require_approval=True)
def transfer(amount: int) -> str:
    """Moves money: a human approves each call."""
    mark("transfer.log", str(amount))
    return f"sent {amount}"


@tool
async def gate() -> str:
    """Waits until the test (or its client) creates `release`."""
    mark("gate.log")
    while not (markers / "release").exists():
        await asyncio.sleep(0.05)
    return "released"


def call(name: str, arguments: dict) -> dict:
    return scripted.call(f"call_{name}", name, arguments)


async def respond(request: LLMRequest) -> dict:
    mark("llm.log", str(len(request.messages)))
    text = str([m.content for m in request.messages if m.role == "user"][-1])
    last = request.messages[-1]
    if last.role == "tool":
        if text == "crash" and life == "first":
            mark("in_llm")
            await asyncio.sleep(3600)  # SIGKILLed here
        return {"type": "text", "content": f"tool said: {last.content}"}
    if text.startswith("weather in "):
        return call("lookup", {"city": text.removeprefix("weather in ")})
    if text.startswith("pay "):
        return call("transfer", {"amount": int(text.removeprefix("pay "))})
    if text == "pick a color":
        return call("pick_color", {"palette": "warm"})
    if text == "gate":
        return call("gate", {})
    if text == "crash":
        return call("lookup", {"city": "Oslo"})
    return {"type": "text", "content": f"Hello from helix: {text}"}


helix = HelixDBOS(
    [Agent("assistant", tools=[lookup, transfer, gate])],
    database_url=database_url,
    llm=MockLLM(respond),
    executor_id=executor_id,
    application_version="ag-ui-test",
)
app = create_app(helix, authenticate=bearer_token(TOKEN))
uvicorn.run(app, host="127.0.0.1", port=int(port), log_level="warning")
