"""Bare DBOS: a workflow of N trivial async steps (the yardstick every ratio uses).

Per-step time is measured inside the workflow (its start and end left out), as in
benchmarks/bench_agent_loop.py; the run time the orchestrator sees is the caller's
(workflow start to result), which gives a bare workflow's own fixed part.
"""

from __future__ import annotations

import time
from typing import Any

from dbos import DBOS

from benchmarks.peers.common import APP_VERSION, SCRIPT, worker_main

INSIDE: list[float] = []


@DBOS.step(name="peers.bare.trivial")
async def trivial_step(i: int) -> int:
    SCRIPT.called()
    return i + 1


@DBOS.workflow(name="peers.bare.steps")
async def bare_steps(n: int) -> float:
    started = time.perf_counter()
    for i in range(n):
        await trivial_step(i)
    return time.perf_counter() - started


class Bare:
    name = "bare"

    async def setup(self, database_url: str) -> None:
        DBOS(
            config={
                "name": "peers-bare",
                "system_database_url": database_url,
                "application_version": APP_VERSION,
                "log_level": "WARNING",
            }
        )
        DBOS.launch()

    async def prepare(self, history: int) -> Any:
        return None

    async def run(self, steps: int, prepared: Any) -> dict[str, Any]:
        INSIDE.append(await bare_steps(steps))
        return {"inside_s": INSIDE[-1]}

    async def shutdown(self) -> None:
        DBOS.destroy()

    async def crash_start(self, database_url: str) -> str:
        raise NotImplementedError

    async def crash_recover(self, database_url: str, run_id: str) -> dict[str, Any]:
        raise NotImplementedError


if __name__ == "__main__":
    worker_main(Bare)
