"""Writes and reads the same stream on any helix build (public API, and the two knobs below):
the test of one chunk row per step (migration 0028) runs it on the build before the
migration and on this one.

argv: database_url, then `write` (prints the session ids of its runs, one JSON line) or
`read SESSION_ID` (prints the session's stream as [seq, type, payload] items, one JSON line).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from helix_dbos import Agent, HelixDBOS, MockLLM, ToolContext, tool
from helix_dbos.runtime.loop import slow_head
from helix_dbos.runtime.steps import tool_step

# No `tool_start` is written live (a tool past 0.1 s on a loaded box), so two builds write
# the same events in the same order.
tool_step.LIVE_TOOL_START_SECONDS = 60.0  # type: ignore[misc]
slow_head.LIVE_TOOL_START_SECONDS = 60.0  # type: ignore[misc]


@tool
def search(query: str) -> str:
    """Search for something."""
    return f"found {query}"


@tool
async def noisy(topic: str, ctx: ToolContext) -> str:
    """Report progress twice, then answer."""
    await ctx.emit("progress", {"topic": topic, "at": 1})
    await ctx.emit("progress", {"topic": topic, "at": 2})
    return f"noted {topic}"


def respond(request):
    answered = sum(1 for m in request.messages if m.role == "assistant")
    if answered == 0:
        calls = [
            {"id": "s1", "name": "search", "arguments": {"query": "a"}},
            {"id": "n1", "name": "noisy", "arguments": {"topic": "b"}},
        ]
        return {"type": "tool_calls", "tool_calls": calls}
    if answered == 1:
        call = {"id": "s2", "name": "search", "arguments": {"query": "c"}}
        return {"type": "tool_calls", "tool_calls": [call]}
    return {"type": "text", "content": "done"}


agent = Agent("chunk_agent", system_prompt="You search.", tools=[search, noisy])
helix = HelixDBOS(agents=[agent], llm=MockLLM(respond), database_url=sys.argv[1])


async def write() -> list[str]:
    sessions = []
    for text in ("first", "second"):
        result = await (await helix.execute(agent, text)).result()
        assert result.status == "completed", result
        sessions.append(result.session_id)
    return sessions


async def read(session_id: str) -> list[list[object]]:
    return [[c.seq, c.type, c.payload] async for c in helix.stream(session_id, follow=False)]


async def main() -> None:
    helix.launch()
    if sys.argv[2] == "write":
        print(json.dumps(await write()), flush=True)
        return
    print(json.dumps(await read(sys.argv[3])), flush=True)
    # Seen hanging past its output under the tests' fork server (the stream's LISTEN
    # connection, not reproduced outside it): the output is all a reader run is for.
    os._exit(0)


asyncio.run(main())
helix.shutdown()
