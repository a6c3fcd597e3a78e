"""The fleet benchmark's application: one agent, a scripted model, a marker per tool call.

Three kinds of process run this file (bench_workers.py starts them all):

- a worker: `helix-dbos worker --app benchmarks/fleet_app.py:worker` (the real CLI);
- the front: `fleet_app.py front N` enqueues N runs with `executes_runs=False` and exits;
- a victim: `fleet_app.py victim R` starts R runs in-process whose tool blocks, and waits
  to be SIGKILLed (the recovery benchmark).

Settings come from the environment, so the CLI's worker needs no flag of ours:
FLEET_DATABASE_URL, FLEET_MARKERS (a directory), FLEET_LEASE (seconds),
FLEET_WORKER_CONCURRENCY (put the agent in a RunQueue with that per-worker limit; unset:
only the agent's own queue), FLEET_GO (a worker launches once this file exists, so that
several workers start draining together), FLEET_CONCURRENCY (the front's enqueue calls
in flight, default 20), FLEET_SYS_DB_POOL and FLEET_POOL (connection pools: DBOS's
system database, default 6; helix's, default 3 plus as many overflow), FLEET_OTHER_HOST
(a worker that cannot see the pids of this host, as a worker on another machine: it tells
a dead worker by its closed connection and missed heartbeats only).

The model is a function of the transcript: the first LLM step calls the tool `work` with
the run's tag (the user message), the second one calls `__finish__`. Every execution of
`work` appends `tag executor_id time` to a file of its process in FLEET_MARKERS, so the
benchmark counts executions per run; its result names the executor, so the benchmark
can tell which execution the run kept.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from dbos import DBOS
from pydantic import BaseModel

from helix_dbos import Agent, HelixDBOS, MockLLM, RunQueue, tool
from helix_dbos.orchestration.types import LLMRequest
from helix_dbos.runtime.process.workers import default_executor_id
from helix_dbos.store.database import libpq_url

AGENT_NAME = "fleet_agent"
QUEUE_NAME = "fleet"
APP_VERSION = "fleet-bench"
HOLD_PREFIX = "hold-"  # a victim's tool blocks on these tags until the process is killed

MARKERS = Path(os.environ.get("FLEET_MARKERS", "."))
if os.environ.get("FLEET_OTHER_HOST"):
    from helix_dbos.runtime.process import workers as _workers

    _workers.pid_gone = lambda host, pid: False  # type: ignore[assignment]
ROLE = os.environ.get("FLEET_ROLE", "worker")


class Report(BaseModel):
    summary: str


def _mark(line: str) -> None:
    # One write(2) of one short line with O_APPEND: whole, and still in the page cache
    # after a SIGKILL (no fsync: the benchmark never crashes the machine).
    fd = os.open(MARKERS / f"tool-{os.getpid()}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        os.write(fd, line.encode() + b"\n")
    finally:
        os.close(fd)


@tool
async def work(tag: str) -> str:
    """Returns at once (a victim holds its `hold-` runs here until it is killed)."""
    executor = DBOS.executor_id
    _mark(f"{tag} {executor} {time.time():.6f}")
    if ROLE == "victim" and tag.startswith(HOLD_PREFIX):
        await asyncio.sleep(3600)
    return f"{tag} by {executor}"


def respond(request: LLMRequest) -> dict[str, Any]:
    tag = next(m.content for m in reversed(request.messages) if m.role == "user")
    if not any(m.role == "tool" for m in request.messages):
        call = {"id": "w", "name": "work", "arguments": {"tag": tag}}
        return {"type": "tool_calls", "tool_calls": [call]}
    finish = {"id": "fin", "name": "__finish__", "arguments": {"summary": f"{tag} done"}}
    return {"type": "tool_calls", "tool_calls": [finish]}


agent = Agent(AGENT_NAME, tools=[work], output_schema=Report, max_steps=5)


def build(*, executes_runs: bool) -> HelixDBOS:
    database_url = os.environ["FLEET_DATABASE_URL"]
    # DBOS configured here only to shrink its system-database pool (20 by default): the
    # shared server has 100 connections and other work on it. Otherwise exactly what
    # HelixDBOS configures (it leaves an application's own configuration alone).
    DBOS(
        config={
            "name": "helix_dbos",
            "system_database_url": libpq_url(database_url),
            "application_version": APP_VERSION,
            "log_level": "WARNING",
            "executor_id": default_executor_id(),
            "sys_db_pool_size": int(os.environ.get("FLEET_SYS_DB_POOL", "6")),
        }
    )
    worker_concurrency = os.environ.get("FLEET_WORKER_CONCURRENCY")
    queues = (
        [RunQueue(QUEUE_NAME, [agent], worker_concurrency=int(worker_concurrency))]
        if worker_concurrency
        else []
    )
    return HelixDBOS(
        [agent],
        database_url=database_url,
        pool_size=int(os.environ.get("FLEET_POOL", "3")),
        llm=MockLLM(respond),
        application_version=APP_VERSION,
        executes_runs=executes_runs,
        queues=queues,
        worker_lease_seconds=float(os.environ.get("FLEET_LEASE", "15")),
    )


def worker() -> HelixDBOS:
    """The factory `helix-dbos worker --app benchmarks/fleet_app.py:worker` calls."""
    helix = build(executes_runs=True)
    go = os.environ.get("FLEET_GO")
    if go:
        (MARKERS / f"built-{os.getpid()}").touch()
        while not Path(go).exists():
            time.sleep(0.02)
    return helix


async def front(helix: HelixDBOS, count: int) -> None:
    """Enqueue `count` runs (this process executes none), report how long it took."""
    helix.launch()
    limit = asyncio.Semaphore(int(os.environ.get("FLEET_CONCURRENCY", "20")))
    prefix = os.environ.get("FLEET_TAG_PREFIX", "run-")

    async def one(i: int) -> None:
        async with limit:
            await helix.execute(agent, f"{prefix}{i}")

    print(json.dumps({"ready": time.time()}), flush=True)
    first = time.time()
    await asyncio.gather(*(one(i) for i in range(count)))
    print(json.dumps({"enqueued": count, "first": first, "last": time.time()}), flush=True)


async def victim(helix: HelixDBOS, count: int) -> None:
    """Start `count` runs here (no queue: a worker starts its own runs) and wait; their
    tool calls block until the benchmark kills this process."""
    helix.launch()
    assert helix.lease is not None
    prefix = os.environ.get("FLEET_TAG_PREFIX", "")
    runs = [(await helix.execute(agent, f"{HOLD_PREFIX}{prefix}{i}")).run_id for i in range(count)]
    print(json.dumps({"executor_id": helix.lease.identity.executor_id, "runs": runs}), flush=True)
    await asyncio.sleep(3600)


if __name__ == "__main__":
    mode, n = sys.argv[1], int(sys.argv[2])
    app = build(executes_runs=mode != "front")
    asyncio.run(front(app, n) if mode == "front" else victim(app, n))
    app.shutdown()
