"""What a sub-agent call costs, next to running the same agent directly.

One process, one fresh database, measurements alternated round by round:

1. direct: `execute(child)` to its result (the child answers in one model call);
2. plain: a parent whose first step calls a no-op tool, then answers;
3. delegated: the same parent calling `subagent__child` instead of the tool.

`delegated - plain` is what the sub-agent call adds to the parent's run; the ratio
`(delegated - plain) / direct` is its cost relative to running the child on its own
(1.0: delegation costs exactly one child run). Then one parent step that calls
`--fanout` sub-agents at once, next to the same number of children started directly
and awaited together.

usage: .venv/bin/python benchmarks/bench_subagents.py [--rounds N] [--fanout N] [--database-url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench_agent_loop import fresh_database, server_url

from helix_dbos import Agent, HelixDBOS, MockLLM, sub_agent_tool, tool
from helix_dbos.orchestration.types import LLMRequest
from helix_dbos.store.database import redact_url


@tool
def noop() -> str:
    """Does nothing."""
    return "ok"


child = Agent("bench_child")
plain = Agent("bench_plain", tools=[noop])
parent = Agent("bench_parent", tools=[sub_agent_tool(child, name="child")])
fanout_parent = Agent("bench_fanout", tools=[sub_agent_tool(child, name="child")])
FANOUT = {"n": 50}


def respond(request: LLMRequest) -> dict[str, Any]:
    if request.agent_name == child.name or request.messages[-1].role == "tool":
        return {"type": "text", "content": "done"}
    if request.agent_name == plain.name:
        return {"type": "tool_calls", "tool_calls": [{"id": "t", "name": "noop", "arguments": {}}]}
    count = FANOUT["n"] if request.agent_name == fanout_parent.name else 1
    calls = [
        {"id": f"c{i}", "name": "subagent__child", "arguments": {"message": f"task {i}"}}
        for i in range(count)
    ]
    return {"type": "tool_calls", "tool_calls": calls}


async def timed(helix: HelixDBOS, agent: Agent) -> float:
    started = time.perf_counter()
    result = await (await helix.execute(agent, "go")).result()
    if result.status != "completed":
        raise RuntimeError(f"{agent.name} ended {result.status}: {result.error}")
    return (time.perf_counter() - started) * 1000


async def measure(helix: HelixDBOS, rounds: int) -> None:
    for agent in (child, plain, parent):  # warm-up
        await timed(helix, agent)
    direct: list[float] = []
    without: list[float] = []
    delegated: list[float] = []
    for _ in range(rounds):
        direct.append(await timed(helix, child))
        without.append(await timed(helix, plain))
        delegated.append(await timed(helix, parent))
    d, w, g = (statistics.median(x) for x in (direct, without, delegated))
    print(f"direct child run          {d:8.1f} ms (median of {rounds})")
    print(f"parent with a plain tool  {w:8.1f} ms")
    print(f"parent with a sub-agent   {g:8.1f} ms")
    print(f"sub-agent call adds       {g - w:8.1f} ms = {(g - w) / d:.2f} x a direct child run")

    n = FANOUT["n"]
    started = time.perf_counter()
    handles = [await helix.execute(child, f"task {i}") for i in range(n)]
    await asyncio.gather(*(h.result() for h in handles))
    many_direct = (time.perf_counter() - started) * 1000
    fan = await timed(helix, fanout_parent)
    print(f"\n{n} children started directly, awaited together  {many_direct:8.1f} ms")
    print(f"{n} sub-agent calls from one parent step         {fan:8.1f} ms")
    print(f"ratio (fan-out / direct)                         {fan / many_direct:8.2f}")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--fanout", type=int, default=50)
    parser.add_argument("--database-url")
    args = parser.parse_args(argv)
    FANOUT["n"] = args.fanout
    server, kind = server_url(args.database_url)
    with fresh_database(server) as url:
        print(f"database: {redact_url(url)} ({kind})")
        helix = HelixDBOS(
            [child, plain, parent, fanout_parent],
            database_url=url,
            llm=MockLLM(respond),
            application_version="bench-subagents",
        )
        helix.launch()
        try:
            asyncio.run(measure(helix, args.rounds))
        finally:
            helix.shutdown()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main(sys.argv[1:])
