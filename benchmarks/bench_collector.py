"""What Python's garbage collector costs a run, at 10 and at 1,000 messages of history.

A run on a session this process has not cached reads the whole transcript once and keeps
it (`HistoryCache`): every object that read leaves alive is walked again by each full
collection for as long as the session stays cached, and full collections come every time
the survivors since the last one reach a quarter of the long-lived objects. So each
object a cached message holds costs every later run a share of the collector's time,
and a run at 1,000 messages pays it for thousands (issue 48).

    .venv/bin/python benchmarks/bench_collector.py --database-url postgresql://postgres@127.0.0.1:5432/postgres

The agent loop benchmark's ping agent (`bench_agent_loop.launch_bench`) in one process:
three warm-up runs, then `--runs` 21-step runs, each on a new session seeded with SQL with
10 messages, then as many with 1,000 (as `bench_agent_loop.py` seeds them). Reports, for
each size, the collector's time per run by generation (`gc.callbacks`), and, from three
more runs at 1,000 messages each between two full collections, the objects a run leaves
alive (all of them the cached transcript) per message read. Run it with
`PYTHONPATH=<an older checkout>` in the same sitting to compare. `--freeze` calls
`gc.freeze()` after the warm-up runs (what docs/fleet.md suggests a long-lived worker may
do): the objects alive then are left out of every later collection. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_agent_loop import Bench, fresh_database, launch_bench
from bench_common import rounded

import helix_dbos

STEPS = 21


class CollectorClock:
    """Time spent in each generation's collections, from `gc.callbacks`."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self._started = 0.0
        gc.callbacks.append(self._on)

    def _on(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        generation = info["generation"]
        self.count[generation] += 1
        self.seconds[generation] += time.perf_counter() - self._started

    def reset(self) -> None:
        self.count, self.seconds = [0, 0, 0], [0.0, 0.0, 0.0]


async def per_run(bench: Bench, clock: CollectorClock, history: int, runs: int) -> dict[str, Any]:
    clock.reset()
    steps: list[float] = []
    for _ in range(runs):
        session_id = bench.session_with_history(history)
        steps.append((await bench.agent_run(STEPS, session_id)).per_step_ms)
    return {
        "runs": runs,
        "step_ms_median": statistics.median(steps),
        "collector_ms_per_run": sum(clock.seconds) * 1e3 / runs,
        "by_generation_ms_per_run": [round(s * 1e3 / runs, 3) for s in clock.seconds],
        "collections_per_run": [round(c / runs, 3) for c in clock.count],
    }


async def survivors_per_message(bench: Bench, history: int) -> float:
    """Objects tracked by the collector that a cold run leaves alive, per message read."""
    counts = []
    for _ in range(3):
        session_id = bench.session_with_history(history)
        gc.collect()
        before = len(gc.get_objects())
        await bench.agent_run(STEPS, session_id)
        gc.collect()
        counts.append((len(gc.get_objects()) - before) / history)
    return statistics.median(counts)


async def run(database_url: str, runs: int, freeze: bool) -> dict[str, Any]:
    clock = CollectorClock()
    with fresh_database(database_url) as url:
        bench = launch_bench(url)
        try:
            for _ in range(3):
                await bench.agent_run(STEPS)
            if freeze:
                gc.freeze()
            small = await per_run(bench, clock, 10, runs)
            large = await per_run(bench, clock, 1000, runs)
            survivors = await survivors_per_message(bench, 1000)
            gc.collect()
            tracked = len(gc.get_objects())
            started = time.perf_counter()
            gc.collect()
            full_ms = (time.perf_counter() - started) * 1e3
        finally:
            bench.close()
            bench.helix.shutdown()
    return {
        "code": str(Path(helix_dbos.__file__).resolve().parent.parent),
        "frozen_at_start": gc.get_freeze_count(),
        "history_10": small,
        "history_1000": large,
        "objects_left_per_message_read": survivors,
        "tracked_objects_at_end": tracked,
        "full_collection_ms_at_end": full_ms,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--freeze", action="store_true", help="gc.freeze() after warm-up")
    args = parser.parse_args()
    print(json.dumps(rounded(asyncio.run(run(args.database_url, args.runs, args.freeze)))))


if __name__ == "__main__":
    main()
