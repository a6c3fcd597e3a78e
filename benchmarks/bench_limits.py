"""What a call slot costs: one-call runs of a model with fleet-wide limits next to the
same runs of a model without (docs/limits.md).

One process, one fresh database, runs alternated one by one: an agent on `mock:free`
(no limits: the agent loop's usual path) and one on `mock:limited`
(`LLMConfig(max_concurrent=1000)`: a slot per call, never waited for), each run one
model call that answers at once. The difference is the slot's durable operations and
the wait for the model queue's next poll (every 0.25 s); with one run at a time the
limit itself never holds a call back.

usage: .venv/bin/python benchmarks/bench_limits.py [--runs N] [--database-url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from typing import Any

from bench_agent_loop import fresh_database, server_url
from bench_common import rounded

from helix_dbos import Agent, HelixDBOS, LLMConfig, MockLLM


def answer(_: Any) -> dict[str, Any]:
    return {"type": "text", "content": "ok"}


async def one_run(helix: HelixDBOS, agent: Agent) -> float:
    started = time.perf_counter()
    result = await (await helix.execute(agent, "hi")).result()
    assert result.status == "completed", result.error
    return (time.perf_counter() - started) * 1000


async def run(args: argparse.Namespace) -> dict[str, Any]:
    server, _ = server_url(args.database_url)
    with fresh_database(server) as database_url:
        free = Agent("bench_free", llm=LLMConfig(model="mock:free"))
        limited = Agent("bench_limited", llm=LLMConfig(model="mock:limited", max_concurrent=1000))
        helix = HelixDBOS(
            [free, limited],
            database_url=database_url,
            llm=MockLLM(answer),
            executor_id=f"bench-{uuid.uuid4().hex[:8]}",
            application_version="helix-bench",
        )
        helix.launch()
        try:
            for agent in (free, limited):  # warm-up
                await one_run(helix, agent)
            times: dict[str, list[float]] = {"free": [], "limited": []}
            for _ in range(args.runs):
                times["free"].append(await one_run(helix, free))
                times["limited"].append(await one_run(helix, limited))
        finally:
            helix.shutdown()
    free_ms, limited_ms = (statistics.median(times[k]) for k in ("free", "limited"))
    report = {
        "runs": args.runs,
        "free_run_median_ms": free_ms,
        "limited_run_median_ms": limited_ms,
        "slot_overhead_ms": limited_ms - free_ms,
        "limited_over_free": limited_ms / free_ms,
    }
    print(json.dumps(rounded(report), indent=2))
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="runs of each agent (default 20)")
    parser.add_argument(
        "--database-url",
        help="PostgreSQL server (default $HELIX_BENCH_DATABASE_URL, else embedded)",
    )
    asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
