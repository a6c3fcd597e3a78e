"""Writes the same usage on any helix build (public API only): the migration test of
`helix.usage` (migration 0027) runs it on the build before the migration and on this one.

argv: database_url. Prints the run ids it made, one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import sys

from helix_dbos import Agent, HelixDBOS, MockLLM, tool


@tool
def search(query: str) -> str:
    """Search for something."""
    return f"found {query}"


@tool
def broken(query: str) -> str:
    """Always fails."""
    raise ValueError("broken on purpose")


def respond(request):
    answered = sum(1 for m in request.messages if m.role == "assistant")
    usage = {"input_tokens": 100 + answered, "output_tokens": 7, "cache_read_tokens": 3}
    if answered == 0:
        calls = [
            {"id": "s1", "name": "search", "arguments": {"query": "a"}},
            {"id": "b1", "name": "broken", "arguments": {"query": "b"}},
        ]
        return {"type": "tool_calls", "tool_calls": calls, "usage": usage}
    if answered == 1:
        call = {"id": "s2", "name": "search", "arguments": {"query": "c"}}
        return {"type": "tool_calls", "tool_calls": [call], "usage": usage}
    return {"type": "text", "content": "done", "usage": usage}


agent = Agent("usage_agent", system_prompt="You search.", tools=[search, broken])
helix = HelixDBOS(agents=[agent], llm=MockLLM(respond), database_url=sys.argv[1])


async def main() -> None:
    helix.launch()
    runs = []
    for text in ("first", "second"):
        result = await (await helix.execute(agent, text)).result()
        assert result.status == "completed", result
        runs.append(result.run_id)
    print(json.dumps(runs), flush=True)


asyncio.run(main())
helix.shutdown()
