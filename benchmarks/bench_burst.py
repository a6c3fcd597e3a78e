"""Burst starts: how fast helix starts and drains N runs, next to DBOS's own start rate.

One process, one fresh database, alternating sittings of each:

1. DBOS alone: `DBOS.start_workflow_async` of a workflow with one trivial step, N times
   with `--concurrency` calls in flight; the start rate counts until every call returned,
   the drain until every workflow succeeded.
2. helix: `helix.execute()` of an agent whose scripted model calls one instant tool and
   then answers (two agent steps, a realistic smallest run), N times the same way; the
   drain is until every run's row is `completed`.
3. helix through its agent's queue (`priority=` enqueues): the starts only enqueue, and
   the queue drains them at its concurrency.
4. helix one run at a time (`--sequential` runs): the rate the work itself allows. A
   burst that drains at least as fast is bounded by the work, not by helix's locks or
   its connection pool.
5. helix as a fleet takes a burst: a web front (a process of its own with
   `executes_runs=False`, started by this script) calls `execute()` N times, and one
   worker process (also started here, up for the whole benchmark) drains the agent's
   queue while the front is still starting. The start rate is the front's; the drain
   runs from the front's first call to the last run's `completed` row. A different
   agent name keeps this process from taking those runs.

The figures are rates (runs/s) and their ratios to DBOS's in the same sitting (the
issue's target: helix's start rate at least half of DBOS's).

usage: .venv/bin/python benchmarks/bench_burst.py [--runs N] [--sittings K] [--database-url URL]
       (internal: --role front|worker, the fleet sitting's processes)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from bench_agent_loop import fresh_database, server_url
from bench_common import rounded
from bench_waiting_runs import bounded
from dbos import DBOS

from helix_dbos import Agent, HelixDBOS, MockLLM, tool
from helix_dbos.orchestration.types import LLMRequest
from helix_dbos.runtime.process.event_loop import on_target_loop
from helix_dbos.store.database import libpq_url, redact_url

AGENT_NAME = "bench_burst"
FLEET_AGENT_NAME = "bench_burst_fleet"  # only the front and the worker process know it
APP_VERSION = "helix-bench"  # one version for every process: a worker dequeues only its own
HERE = Path(__file__).resolve().parent
READY_TIMEOUT_S = 120.0  # a front or worker that has not launched by then is killed


@DBOS.step(name="bench.burst_step")
async def burst_step(i: int) -> int:
    return i + 1


@DBOS.workflow(name="bench.burst_workflow")
async def burst_workflow(i: int) -> int:
    return await burst_step(i)


@tool
async def ping() -> str:
    """Answers at once."""
    return "pong"


def responder(request: LLMRequest) -> dict[str, Any]:
    """One tool call, then an answer."""
    if request.messages and request.messages[-1].role == "tool":
        return {"type": "text", "content": "done"}
    return {"type": "tool_calls", "tool_calls": [{"id": "c1", "name": "ping", "arguments": {}}]}


def fleet_helix(database_url: str, *, executes_runs: bool) -> HelixDBOS:
    """The front's or the worker's HelixDBOS: the same agent under the fleet's name.

    Small pools (DBOS's system database 6, helix's 5), as in fleet_app.py: three
    processes with the default pools can exceed a server's 100 connections. A new
    session's start needs one statement connection, so 5 start slots serve the front's
    calls in flight."""
    role = "worker" if executes_runs else "front"
    DBOS(
        config={
            "name": "helix_dbos",
            "system_database_url": libpq_url(database_url),
            "application_version": APP_VERSION,
            "log_level": "WARNING",
            "executor_id": f"bench-{role}-{uuid.uuid4().hex[:8]}",
            "sys_db_pool_size": 6,
        }
    )
    agent = Agent(FLEET_AGENT_NAME, system_prompt="You ping once.", tools=[ping])
    return HelixDBOS(
        [agent],
        database_url=database_url,
        llm=MockLLM(responder),
        application_version=APP_VERSION,
        executes_runs=executes_runs,
        pool_size=5,
    )


async def front_role(database_url: str, runs: int, concurrency: int, marker: str) -> None:
    """A web front: launch, say ready, wait for the go line, enqueue `runs` runs with
    `concurrency` calls in flight, and print when the first and the last call happened."""
    helix = fleet_helix(database_url, executes_runs=False)
    helix.launch()
    try:
        print(json.dumps({"ready": True}), flush=True)
        line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        if line.strip() != "go":  # stdin closed: the benchmark gave up
            return
        first = time.time()

        async def start(i: int) -> str:
            handle = await helix.execute(FLEET_AGENT_NAME, f"{marker} {i}")
            return handle.run_id

        await bounded(concurrency, list(range(runs)), start)
        print(json.dumps({"first": first, "last": time.time()}), flush=True)
    finally:
        await helix.shutdown_async()


async def worker_role(database_url: str) -> None:
    """A worker: launch (DBOS then polls the agent's queue) and run until killed."""
    helix = fleet_helix(database_url, executes_runs=True)
    helix.launch()
    print(json.dumps({"ready": True}), flush=True)
    await asyncio.Event().wait()


@contextmanager
def helper_process(
    role: str, database_url: str, *extra: str, grace_s: float = 0.0
) -> Iterator[subprocess.Popen[str]]:
    """The fleet sitting's front or worker, once it said it is ready (killed if it has
    not within READY_TIMEOUT_S); on the way out its stdin is closed and it is killed
    unless it exits within `grace_s`, so no process outlives the benchmark."""
    proc = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "bench_burst.py"),
            "--role",
            role,
            "--database-url",
            database_url,
            *extra,
        ],
        cwd=HERE,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        hung = threading.Timer(READY_TIMEOUT_S, proc.kill)
        hung.start()
        try:
            read_json(proc)  # {"ready": true}; raises once a killed process's output ends
        finally:
            hung.cancel()
        yield proc
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def read_json(proc: subprocess.Popen[str]) -> dict[str, Any]:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("{"):
            return dict(json.loads(line))
    raise RuntimeError(f"bench_burst {proc.args!r} exited with {proc.wait()}")


async def fleet_sitting(
    database_url: str, conn: psycopg.AsyncConnection[Any], n: int, concurrency: int
) -> dict[str, float]:
    """A front process enqueues n runs while the worker process drains them."""
    marker = uuid.uuid4().hex[:8]
    extra = ("--runs", str(n), "--concurrency", str(concurrency), "--marker", marker)
    with helper_process("front", database_url, *extra, grace_s=60) as front:
        assert front.stdin is not None
        front.stdin.write("go\n")
        front.stdin.flush()
        times = await asyncio.to_thread(read_json, front)
        await wait_completed(conn, marker, n)
        drained = time.time()
    return {
        "start_per_s": n / (times["last"] - times["first"]),
        "drain_per_s": n / (drained - times["first"]),
    }


async def wait_completed(conn: psycopg.AsyncConnection[Any], marker: str, n: int) -> None:
    """Until n runs whose first message starts with `marker` are `completed`."""
    await wait_until(
        conn,
        "SELECT count(*) FROM helix.runs r JOIN helix.messages m ON m.run_id = r.run_id "
        "AND m.seq = 1 WHERE r.status = 'completed' AND m.content LIKE %s",
        (f"{marker} %",),
        n,
    )


async def wait_until(conn: psycopg.AsyncConnection[Any], sql: str, params: Any, n: int) -> None:
    while True:
        row = await (await conn.execute(sql, params)).fetchone()
        if row is not None and row[0] >= n:
            return
        await asyncio.sleep(0.02)


async def dbos_sitting(
    conn: psycopg.AsyncConnection[Any], n: int, concurrency: int
) -> dict[str, float]:
    started = time.perf_counter()
    before = time.time() * 1000

    async def start(i: int) -> str:
        handle = await on_target_loop(lambda: DBOS.start_workflow_async(burst_workflow, i))
        return handle.get_workflow_id()

    await bounded(concurrency, list(range(n)), start)
    start_s = time.perf_counter() - started
    await wait_until(
        conn,
        "SELECT count(*) FROM dbos.workflow_status WHERE name = 'bench.burst_workflow' "
        "AND status = 'SUCCESS' AND created_at >= %s",
        (before,),
        n,
    )
    return {"start_per_s": n / start_s, "drain_per_s": n / (time.perf_counter() - started)}


async def helix_sitting(
    helix: HelixDBOS,
    agent: Agent,
    conn: psycopg.AsyncConnection[Any],
    n: int,
    concurrency: int,
    queued: bool,
) -> dict[str, float]:
    marker = uuid.uuid4().hex[:8]
    started = time.perf_counter()

    async def start(i: int) -> str:
        handle = await helix.execute(agent, f"{marker} {i}", priority=1 if queued else None)
        return handle.run_id

    await bounded(concurrency, list(range(n)), start)
    start_s = time.perf_counter() - started
    await wait_completed(conn, marker, n)
    return {"start_per_s": n / start_s, "drain_per_s": n / (time.perf_counter() - started)}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    server, kind = server_url(args.database_url)
    with fresh_database(server) as database_url:
        agent = Agent(AGENT_NAME, system_prompt="You ping once.", tools=[ping])
        helix = HelixDBOS(
            [agent],
            database_url=database_url,
            llm=MockLLM(responder),
            executor_id=f"bench-{uuid.uuid4().hex[:8]}",
            application_version=APP_VERSION,
        )
        helix.launch()
        sittings: dict[str, list[dict[str, float]]] = {
            "dbos": [],
            "helix": [],
            "queued": [],
            "sequential": [],
            "fleet": [],
        }
        try:
            with helper_process("worker", database_url):
                async with await psycopg.AsyncConnection.connect(
                    libpq_url(database_url), autocommit=True
                ) as conn:
                    await helix_sitting(helix, agent, conn, 20, 5, False)  # warm-up
                    await helix_sitting(helix, agent, conn, 20, 5, True)
                    await dbos_sitting(conn, 20, 5)
                    await fleet_sitting(database_url, conn, 20, 5)
                    for k in range(args.sittings):
                        for name in ("dbos", "helix", "queued", "sequential", "fleet"):
                            if name == "dbos":
                                figures = await dbos_sitting(conn, args.runs, args.concurrency)
                            elif name == "fleet":
                                figures = await fleet_sitting(
                                    database_url, conn, args.runs, args.concurrency
                                )
                            elif name == "sequential":
                                figures = await helix_sitting(
                                    helix, agent, conn, args.sequential, 1, False
                                )
                            else:
                                figures = await helix_sitting(
                                    helix,
                                    agent,
                                    conn,
                                    args.runs,
                                    args.concurrency,
                                    name == "queued",
                                )
                            sittings[name].append(figures)
                            print(
                                f"sitting {k + 1} {name}: {json.dumps(rounded(figures))}",
                                flush=True,
                            )
        finally:
            await helix.shutdown_async()
    report = summarize(sittings)
    print_report(kind, redact_url(server), args, report)
    return report


def summarize(sittings: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """Medians, and each sitting's helix rates over DBOS's in the same sitting."""
    out: dict[str, Any] = {}
    for name, rows in sittings.items():
        out[name] = {key: statistics.median(r[key] for r in rows) for key in rows[0]}
    out["burst_drain_over_sequential"] = statistics.median(
        h["drain_per_s"] / q["drain_per_s"]
        for h, q in zip(sittings["helix"], sittings["sequential"], strict=True)
    )
    for name in ("helix", "queued", "fleet"):
        out[f"{name}_over_dbos"] = {
            key: statistics.median(
                h[key] / d[key] for h, d in zip(sittings[name], sittings["dbos"], strict=True)
            )
            for key in ("start_per_s", "drain_per_s")
        }
    return out


def print_report(kind: str, server: str, args: argparse.Namespace, r: dict[str, Any]) -> None:
    print(
        f"\n## Burst starts ({kind} PostgreSQL {server}; {args.runs} runs, "
        f"{args.concurrency} in flight, medians of {args.sittings} sittings)\n"
    )
    print("| system | starts/s | drained/s | start ratio to DBOS | drain ratio to DBOS |")
    print("|---|---:|---:|---:|---:|")
    print(
        f"| DBOS `start_workflow` (1 step) | {r['dbos']['start_per_s']:.0f} | "
        f"{r['dbos']['drain_per_s']:.0f} | 1 | 1 |"
    )
    for name, label in (
        ("helix", "helix `execute()` (2 agent steps)"),
        ("queued", "helix `execute(priority=1)` (agent queue)"),
        ("fleet", "helix web front (`executes_runs=False`) + 1 worker process"),
    ):
        ratio = r[f"{name}_over_dbos"]
        print(
            f"| {label} | {r[name]['start_per_s']:.0f} | {r[name]['drain_per_s']:.0f} | "
            f"{ratio['start_per_s']:.2f} | {ratio['drain_per_s']:.2f} |"
        )
    print(
        f"| helix one run at a time | | {r['sequential']['drain_per_s']:.0f} | | |\n\n"
        f"Burst drain over one-at-a-time rate: {r['burst_drain_over_sequential']:.2f} "
        "(at least 1: the burst is bounded by the work, not by locks or the pool)"
    )
    print("\n" + json.dumps(rounded(r)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000, help="runs per sitting (default 1000)")
    parser.add_argument("--sittings", type=int, default=3, help="sittings of each (default 3)")
    parser.add_argument(
        "--sequential", type=int, default=50, help="runs one at a time per sitting (default 50)"
    )
    parser.add_argument(
        "--concurrency", type=int, default=20, help="start calls in flight (default 20)"
    )
    parser.add_argument(
        "--database-url",
        help="PostgreSQL server (default $HELIX_BENCH_DATABASE_URL, else embedded)",
    )
    parser.add_argument("--role", choices=("front", "worker"), help=argparse.SUPPRESS)
    parser.add_argument("--marker", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role == "front":
        asyncio.run(front_role(args.database_url, args.runs, args.concurrency, args.marker))
        return
    if args.role == "worker":
        asyncio.run(worker_role(args.database_url))
        return
    if args.runs < 1 or args.concurrency < 1 or args.sittings < 1:
        parser.error("--runs, --concurrency and --sittings must be >= 1")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
