"""A real helix server process for the Vercel AI SDK tests: started, SIGKILLed, relaunched.

usage: ai_sdk_app.py DATABASE_URL PORT EXECUTOR_ID MARKER_DIR

Serves the agent `assistant` (the server's default agent) with the bearer token
"ai-sdk-secret". The LLM is a function of the transcript, so a relaunched process answers
as the killed one would have. What the last user message asks:
- "hello": a text answer;
- "weather <city>": the `lookup` tool, then a text answer with its result;
- "delete <path>": the approval-gated `delete_file` tool, then what became of it;
- "slow <label>": the `slow` tool, which blocks until MARKER_DIR/release_<label> exists;
- "locate <who>": the client-side tool `locate` (the browser runs it);
- "report <topic>": the `report` tool, which emits a `progress` event and sets state;
- "broken <x>": the `broken` tool, which fails;
- "think <x>": an answer with the model's reasoning;
- "delegate <path>": the sub-agent `helper`, which asks to delete the path (an approval
  asked in the sub-agent's session, answered through the chat's).
Every tool execution is appended to a file in MARKER_DIR, so the test can count them.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import uvicorn
from app_marks import marker

from helix_dbos import Agent, HelixDBOS, MockLLM, ToolContext, sub_agent_tool, tool
from helix_dbos.orchestration.types import LLMRequest
from helix_dbos.server import bearer_token, create_app

TOKEN = "ai-sdk-secret"
database_url, port, executor_id, marker_dir = sys.argv[1:5]
markers = Path(marker_dir)

mark = marker(markers)


@tool
def lookup(city: str) -> str:
    """The weather in a city."""
    mark("lookup.log", city)
    return f"sunny in {city}"


@tool(require_approval=True)
def delete_file(path: str) -> str:
    """Deletes a file, once a human approved."""
    mark("delete_file.log", path)
    return f"deleted {path}"


@tool
async def slow(label: str) -> str:
    """Blocks until the test releases the label."""
    mark(f"slow_{label}.log")
    while not (markers / f"release_{label}").exists():
        await asyncio.sleep(0.05)
    return f"slept on {label}"


@tool
async def report(topic: str, ctx: ToolContext) -> str:
    """Reports on a topic, telling the client how far it got."""
    ctx.update_state({"topic": topic})
    await ctx.emit("progress", {"topic": topic, "percent": 100})
    return f"report on {topic}"


@tool
def broken(x: str) -> str:
    """Always fails."""
    raise RuntimeError(f"broken on {x}")


@tool(execute="client")
def locate(who: str) -> dict:
    """Where someone is: the browser knows."""
    raise AssertionError("a client tool runs in the client")


def respond(request: LLMRequest) -> dict:
    last_user = max(i for i, m in enumerate(request.messages) if m.role == "user")
    words = str(request.messages[last_user].content).split()
    results = [m for m in request.messages[last_user:] if m.role == "tool"]
    verb, arg = words[0], " ".join(words[1:])
    tools = {
        "weather": "lookup",
        "delete": "delete_file",
        "slow": "slow",
        "locate": "locate",
        "report": "report",
        "broken": "broken",
    }
    if verb in tools and not results:
        name = tools[verb]
        keys = {"lookup": "city", "delete_file": "path", "slow": "label", "locate": "who"}
        key = {**keys, "report": "topic", "broken": "x"}[name]
        call = {"id": f"call_{name}_{len(request.messages)}", "name": name, "arguments": {key: arg}}
        return {"type": "tool_calls", "tool_calls": [call]}
    if verb == "delegate" and not results:
        call = {
            "id": "call_delegate",
            "name": "subagent__helper",
            "arguments": {"message": f"delete {arg}"},
        }
        return {"type": "tool_calls", "tool_calls": [call]}
    if results:
        return {"type": "text", "content": f"Result: {results[-1].content}"}
    if verb == "think":
        thinking = [{"text": f"pondering {arg}"}]
        return {"type": "text", "content": f"Thought about {arg}", "thinking": thinking}
    return {"type": "text", "content": "Hello there! How can I help?"}


helper = Agent("helper", tools=[delete_file])
tools = [lookup, delete_file, slow, locate, report, broken, sub_agent_tool(helper)]
helix = HelixDBOS(
    [Agent("assistant", tools=tools), helper],
    database_url=database_url,
    llm=MockLLM(respond),
    executor_id=executor_id,
    application_version="ai-sdk-test",
)
app = create_app(helix, authenticate=bearer_token(TOKEN), default_agent="assistant")
uvicorn.run(app, host="127.0.0.1", port=int(port), log_level="warning")
