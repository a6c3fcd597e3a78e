"""Many runs waiting for approval at once in one process: memory, threads, drain time.

One process, one fresh database:

1. Start N agent runs (default 1,000; `helix.execute` with bounded concurrency) whose
   first model reply calls a `require_approval=True` tool, and wait until
   `helix.runs` shows N runs `waiting` (each parked in `DBOS.recv_async`).
2. Measure resident memory (VmRSS) and threads before and while they wait, and the
   process's CPU use over an idle window before the runs start and while they wait
   (make it 60 s or more: each waiter's own fallback re-check, with
   `--per-waiter-recheck`, comes once a minute).
3. Approve all N (`helix.approve`, bounded concurrency) and time until all N runs
   are `completed`.

usage: .venv/bin/python benchmarks/bench_waiting_runs.py [--runs N] [--idle-seconds S]
       [--per-waiter-recheck] [--database-url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import re
import sys
import threading
import time
import uuid
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from bench_agent_loop import fresh_database, server_url
from bench_common import cpu_seconds, profiled, rounded, thread_cpu_seconds
from dbos import DBOS
from dbos._dbos import _get_dbos_instance

import helix_dbos
from helix_dbos import Agent, HelixDBOS, MockLLM, ToolContext, tool
from helix_dbos.orchestration.types import LLMRequest
from helix_dbos.store.database import libpq_url, redact_url

AGENT_NAME = "bench_waiter"
TOOL_CALL_ID = "call_1"
TOOL_RAN: set[str] = set()  # sessions whose gated tool body ran


@DBOS.workflow(name="bench.bare_wait")
async def bare_wait() -> str:
    """The floor (`--bare`): a bare DBOS workflow parked in `recv_async`, nothing else."""
    message = await DBOS.recv_async("approval", timeout_seconds=3600)
    return "answered" if message is not None else "timed out"


@tool(require_approval=True)
async def gated(ctx: ToolContext) -> str:
    """A tool that needs a human's approval."""
    TOOL_RAN.add(ctx.session_id)
    return "done"


def responder(request: LLMRequest) -> dict[str, Any]:
    """First call: ask for the gated tool; after its result: answer."""
    if request.messages and request.messages[-1].role == "tool":
        return {"type": "text", "content": "ok"}
    return {
        "type": "tool_calls",
        "tool_calls": [{"id": TOOL_CALL_ID, "name": "gated", "arguments": {}}],
    }


# --- process figures ---------------------------------------------------------------


def proc_status() -> dict[str, int]:
    """VmRSS (kB) and Threads from /proc/self/status."""
    out: dict[str, int] = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "Threads"):
                out[key] = int(value.split()[0])
    return out


@dataclass
class Snapshot:
    rss_mb: float
    peak_rss_mb: float
    threads_os: int
    threads_python: int
    asyncio_tasks: int

    @classmethod
    def take(cls) -> Snapshot:
        gc.collect()
        st = proc_status()
        return cls(
            rss_mb=st["VmRSS"] / 1024,
            peak_rss_mb=st["VmHWM"] / 1024,
            threads_os=st["Threads"],
            threads_python=threading.active_count(),
            asyncio_tasks=len(asyncio.all_tasks()),
        )


@dataclass
class ThreadSampler:
    """Highest OS thread count seen, sampled every 0.2 s while active."""

    peak: int = 0
    _task: asyncio.Task[None] | None = field(default=None, repr=False)

    def start(self) -> None:
        async def sample() -> None:
            while True:
                self.peak = max(self.peak, proc_status()["Threads"])
                await asyncio.sleep(0.2)

        self._task = asyncio.get_running_loop().create_task(sample())

    async def stop(self) -> int:
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
        return self.peak


# --- the benchmark -----------------------------------------------------------------------


class Counter:
    """Counts runs by status with its own connection (not helix's pool)."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.conn = conn

    async def count(self, status: str) -> int:
        cur = await self.conn.execute(
            "SELECT count(*) FROM helix.runs WHERE status = %s", (status,)
        )
        row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def wait_for(
        self, status: str, target: int, label: str, timeout_s: float, started: float
    ) -> float:
        """Poll every 0.25 s (progress every ~5 s) until `target` runs have `status`;
        returns the seconds since `started`."""
        deadline = time.monotonic() + timeout_s
        last_print = 0.0
        while True:
            n = await self.count(status)
            now = time.perf_counter()
            if n >= target:
                print(f"  {label}: {n}/{target} after {now - started:.1f} s", flush=True)
                return now - started
            if now - last_print >= 5:
                print(f"  {label}: {n}/{target} after {now - started:.1f} s", flush=True)
                last_print = now
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {n}/{target} runs reached '{status}' in {timeout_s} s")
            await asyncio.sleep(0.25)


async def bounded(concurrency: int, items: list[Any], func: Any) -> list[Any]:
    """`func(item)` for each item, at most `concurrency` at a time, results in order."""
    semaphore = asyncio.Semaphore(concurrency)

    async def one(item: Any) -> Any:
        async with semaphore:
            return await func(item)

    return list(await asyncio.gather(*(one(i) for i in items)))


async def warm_up(helix: HelixDBOS, agent: Agent, counter: Counter, runs: int) -> None:
    """`runs` runs at once through the whole path (start, wait, approve, complete), so
    code, plans, pools and threads are at the size that many calls in flight need before
    'before': what grows after it is what the waiting runs hold, not the process's
    warm state (one warm-up run left 30 MB of it in a 1,000-run figure)."""
    handles = await asyncio.gather(*(helix.execute(agent, f"warm {i}") for i in range(runs)))
    await counter.wait_for("waiting", runs, "warm-up waiting", 120, time.perf_counter())
    await asyncio.gather(*(helix.approve(h.session_id, TOOL_CALL_ID) for h in handles))
    results = await asyncio.gather(*(h.result() for h in handles))
    if any(r.status != "completed" for r in results):
        raise RuntimeError(f"warm-up runs did not complete: {results}")


async def measure(
    helix: HelixDBOS, agent: Agent, mock: MockLLM, database_url: str, args: argparse.Namespace
) -> dict[str, Any]:
    n = args.runs
    async with await psycopg.AsyncConnection.connect(
        libpq_url(database_url), autocommit=True
    ) as conn:
        counter = Counter(conn)
        await warm_up(helix, agent, counter, args.concurrency)
        mock.inputs.clear()
        await asyncio.sleep(1)
        before = Snapshot.take()
        idle_cpu_before, threads_before = await idle_cpu(args.idle_seconds)
        sampler = ThreadSampler()
        sampler.start()

        # 1. start N runs
        print(f"starting {n} runs (concurrency {args.concurrency})", flush=True)
        started = time.perf_counter()

        async def start(i: int) -> str:
            handle = await helix.execute(agent, f"go {i}")
            if (i + 1) % 200 == 0:
                print(f"  execute() returned for {i + 1}/{n}", flush=True)
            return handle.session_id

        async def start_all() -> tuple[list[str], float]:
            with profiled(args.pyinstrument, "start"):
                sessions = await bounded(args.concurrency, list(range(n)), start)
            return sessions, time.perf_counter() - started

        (sessions, executed_s), waiting_s = await asyncio.gather(
            start_all(), counter.wait_for("waiting", n, "waiting", args.timeout, started)
        )
        peak_threads_start = await sampler.stop()
        # MockLLM keeps every request it was sent (for tests to inspect); a real model's
        # adapter keeps none, so its log is no part of what a waiting run costs.
        mock.inputs.clear()

        # 2. while they wait (after --settle: the waits parked by age have parked)
        await asyncio.sleep(1 + args.settle)
        during = Snapshot.take()
        parking_waiting = parking_counts(helix)
        idle_cpu_waiting, threads_waiting = await idle_cpu(args.idle_seconds)

        # 3. approve all, drain
        print(f"approving {n} runs (concurrency {args.concurrency})", flush=True)
        sampler = ThreadSampler()
        sampler.start()
        TOOL_RAN.clear()
        approve_start = time.perf_counter()

        async def approve_all() -> float:
            await bounded(args.concurrency, sessions, lambda sid: helix.approve(sid, TOOL_CALL_ID))
            return time.perf_counter() - approve_start

        with profiled(args.pyinstrument, "drain"):
            approved_s, drained_s = await asyncio.gather(
                approve_all(),
                counter.wait_for(
                    "completed", n + args.concurrency, "completed", args.timeout, approve_start
                ),
            )
        peak_threads_drain = await sampler.stop()
        completed = await counter.count("completed") - args.concurrency  # minus the warm-up
        after = Snapshot.take()
    if completed != n or len(TOOL_RAN) != n:
        raise RuntimeError(f"{completed} runs completed and {len(TOOL_RAN)} tools ran, of {n}")
    return {
        "runs": n,
        "concurrency": args.concurrency,
        "start": {
            "execute_all_s": executed_s,
            "all_waiting_s": waiting_s,
            "runs_per_s": n / waiting_s,
        },
        "before": vars(before),
        "waiting": vars(during),
        "after_drain": vars(after),
        "rss_per_waiting_run_kb": (during.rss_mb - before.rss_mb) * 1024 / n,
        "settle_s": args.settle,
        "parking_while_waiting": parking_waiting,
        "parking_after_drain": parking_counts(helix),
        "threads_peak_while_starting": peak_threads_start,
        "threads_peak_while_draining": peak_threads_drain,
        "idle_cpu_cores_before": idle_cpu_before,
        "idle_cpu_cores_while_waiting": idle_cpu_waiting,
        "idle_cpu_by_thread_before": threads_before,
        "idle_cpu_by_thread_while_waiting": threads_waiting,
        "per_waiter_recheck": args.per_waiter_recheck,
        "idle_seconds": args.idle_seconds,
        "drain": {
            "approve_calls_s": approved_s,
            "all_completed_s": drained_s,
            "runs_per_s": n / drained_s,
            "completed": completed,
        },
        "drain_over_start_rate": (n / drained_s) / (n / waiting_s),
    }


async def measure_bare(args: argparse.Namespace) -> dict[str, Any]:
    """The same phases with N bare DBOS workflows parked in `recv_async`: DBOS's own cost
    of a waiting workflow, the floor under helix's."""
    n = args.runs
    waiters = _get_dbos_instance()._sys_db.notifications_map
    # The same warm-up as helix's: `--concurrency` workflows through the whole path.
    warm = await asyncio.gather(
        *(DBOS.start_workflow_async(bare_wait) for _ in range(args.concurrency))
    )
    while len(waiters.snapshot()) < len(warm):
        await asyncio.sleep(0.05)
    for h in warm:
        await DBOS.send_async(h.workflow_id, {"approved": True}, "approval")
    await asyncio.gather(*(h.get_result() for h in warm))
    await asyncio.sleep(1)
    before = Snapshot.take()
    idle_cpu_before, threads_before = await idle_cpu(args.idle_seconds)
    started = time.perf_counter()
    handles = await bounded(
        args.concurrency, list(range(n)), lambda _: DBOS.start_workflow_async(bare_wait)
    )
    executed_s = time.perf_counter() - started
    while len(waiters.snapshot()) < n:  # every one registered in recv, so parked
        await asyncio.sleep(0.05)
    waiting_s = time.perf_counter() - started
    await asyncio.sleep(1)
    during = Snapshot.take()
    idle_cpu_waiting, threads_waiting = await idle_cpu(args.idle_seconds)
    approve_start = time.perf_counter()
    await bounded(
        args.concurrency,
        handles,
        lambda h: DBOS.send_async(h.workflow_id, {"approved": True}, "approval"),
    )
    approved_s = time.perf_counter() - approve_start
    results = await asyncio.gather(*(h.get_result() for h in handles))
    drained_s = time.perf_counter() - approve_start
    after = Snapshot.take()
    completed = sum(1 for r in results if r == "answered")
    return {
        "runs": n,
        "concurrency": args.concurrency,
        "start": {
            "execute_all_s": executed_s,
            "all_waiting_s": waiting_s,
            "runs_per_s": n / waiting_s,
        },
        "before": vars(before),
        "waiting": vars(during),
        "after_drain": vars(after),
        "rss_per_waiting_run_kb": (during.rss_mb - before.rss_mb) * 1024 / n,
        "threads_peak_while_starting": during.threads_os,
        "threads_peak_while_draining": after.threads_os,
        "idle_cpu_cores_before": idle_cpu_before,
        "idle_cpu_cores_while_waiting": idle_cpu_waiting,
        "idle_cpu_by_thread_before": threads_before,
        "idle_cpu_by_thread_while_waiting": threads_waiting,
        "per_waiter_recheck": args.per_waiter_recheck,
        "idle_seconds": args.idle_seconds,
        "drain": {
            "approve_calls_s": approved_s,
            "all_completed_s": drained_s,
            "runs_per_s": n / drained_s,
            "completed": completed,
        },
        "drain_over_start_rate": waiting_s / drained_s,
    }


async def idle_cpu(seconds: float) -> tuple[float, dict[str, float]]:
    """The process's CPU time over `seconds` of doing nothing, in cores, and each
    thread's share (threads of one pool summed: digits in names are `N`) where it was
    0.05 % of a core or more."""
    cpu0, threads0, wall0 = cpu_seconds(), thread_cpu_seconds(), time.perf_counter()
    await asyncio.sleep(seconds)
    cpu1, threads1, wall = cpu_seconds(), thread_cpu_seconds(), time.perf_counter() - wall0
    by_kind: dict[str, float] = {}
    for name, used in threads1.items():
        kind = re.sub(r"\d+", "N", name)
        by_kind[kind] = by_kind.get(kind, 0.0) + (used - threads0.get(name, 0.0)) / wall
    shares = {k: v for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1]) if v >= 0.0005}
    return (cpu1 - cpu0) / wall, shares


def print_report(kind: str, url: str, r: dict[str, Any]) -> None:
    n = r["runs"]
    b, w, a = r["before"], r["waiting"], r["after_drain"]
    print(f"\n{r['what']}, database: {kind} ({redact_url(url)})")
    print(f"code measured: {r['code']}")
    print(
        f"cores: {r['cores']}, python {sys.version.split()[0]}, {n} runs, "
        f"concurrency {r['concurrency']} for execute() and approve()\n"
    )
    s, d = r["start"], r["drain"]
    rows = [
        ("execute() returned for all runs", f"{s['execute_all_s']:.1f} s", ""),
        (
            "all runs waiting (helix.runs)",
            f"{s['all_waiting_s']:.1f} s",
            f"{s['runs_per_s']:.0f} runs/s",
        ),
        ("approve() calls done", f"{d['approve_calls_s']:.1f} s", ""),
        ("all runs completed", f"{d['all_completed_s']:.1f} s", f"{d['runs_per_s']:.0f} runs/s"),
        ("", "", ""),
        ("", "before", f"{n} waiting"),
        ("resident memory (VmRSS)", f"{b['rss_mb']:.1f} MB", f"{w['rss_mb']:.1f} MB"),
        ("threads (/proc/self/status)", f"{b['threads_os']}", f"{w['threads_os']}"),
        ("threads (threading.active_count)", f"{b['threads_python']}", f"{w['threads_python']}"),
        ("asyncio tasks", f"{b['asyncio_tasks']}", f"{w['asyncio_tasks']}"),
    ]
    for label, v1, v2 in rows:
        print(f"{label:<36} {v1:>10} {v2:>14}")
    print(f"\nmemory per waiting run: {r['rss_per_waiting_run_kb']:.1f} kB")
    print(
        f"threads: peak {r['threads_peak_while_starting']} while starting, "
        f"{w['threads_os']} while {n} wait, peak {r['threads_peak_while_draining']} while "
        f"draining, {a['threads_os']} after"
    )
    recheck = "each waiter's own (DBOS)" if r["per_waiter_recheck"] else "one shared (helix)"
    print(
        f"CPU while idle ({r['idle_seconds']:g} s), re-check of waiters {recheck}: "
        f"{r['idle_cpu_cores_before'] * 100:.1f}% of one core before, "
        f"{r['idle_cpu_cores_while_waiting'] * 100:.1f}% while {n} runs wait"
    )
    for label, shares in (
        ("before", r["idle_cpu_by_thread_before"]),
        (f"while {n} wait", r["idle_cpu_by_thread_while_waiting"]),
    ):
        listed = ", ".join(f"{name} {share * 100:.2f}%" for name, share in shares.items())
        print(f"  by thread, {label}: {listed}")
    print(f"drain rate / start rate: {r['drain_over_start_rate']:.2f}")
    if r.get("parking_while_waiting"):
        pw, pa = r["parking_while_waiting"], r["parking_after_drain"]
        print(
            f"parking: {pw['in_memory']} waits in memory and {pw['parked']} parked while all "
            f"wait (measured {r['settle_s']:g} s after the last started); "
            f"{pa['resumed_total']} parked runs resumed by the drain"
        )
    print(f"after the drain: VmRSS {a['rss_mb']:.1f} MB, peak (VmHWM) {a['peak_rss_mb']:.1f} MB")


def parking_options(args: argparse.Namespace) -> dict[str, Any]:
    """Helix's parking policy for this sitting (`wait_parking.py`); helix's defaults
    unless given (a tree before parking takes neither)."""
    options: dict[str, Any] = {}
    if args.in_memory is not None:
        options["waiting_runs_in_memory"] = args.in_memory
    if args.park_after is not None:
        options["park_waiting_runs_after_seconds"] = args.park_after
    return options


def parking_counts(helix: HelixDBOS) -> dict[str, int]:
    parking = getattr(helix.runtime, "parking", None)
    if parking is None:
        return {}
    return {
        "in_memory": parking.in_memory,
        "parked": parking.parked,
        "parked_total": parking.parked_total,
        "resumed_total": parking.resumed_total,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    server, kind = server_url(args.database_url)
    with fresh_database(server) as database_url:
        agent = Agent(AGENT_NAME, system_prompt="You ask first.", tools=[gated])
        mock = MockLLM(responder)
        helix = HelixDBOS(
            [agent],
            database_url=database_url,
            llm=mock,
            executor_id=f"bench-{uuid.uuid4().hex[:8]}",
            application_version="helix-bench",
            **parking_options(args),
        )
        helix.launch()  # on this loop
        recheck = getattr(helix._process, "_recheck", None)  # absent before issue 34
        if args.per_waiter_recheck and recheck is not None:  # DBOS's timer per waiter (A/B)
            recheck.stop()
        try:
            if args.bare:
                figures = await measure_bare(args)
            else:
                figures = await measure(helix, agent, mock, database_url, args)
        finally:
            helix.shutdown()
    result = {
        "what": "bare DBOS workflows in recv" if args.bare else "helix runs waiting for approval",
        "database": kind,
        "code": str(Path(helix_dbos.__file__).parent),
        "cores": os.cpu_count(),
        **figures,
    }
    print_report(kind, server, result)
    print("\n" + json.dumps(rounded(result)))
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--runs", type=int, default=1000, help="runs waiting at once (default 1000)"
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=20,
        help="execute()/approve() calls in flight (default 20)",
    )
    parser.add_argument(
        "--idle-seconds", type=float, default=5.0, help="CPU measured over this idle window"
    )
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="give up on a phase after this many seconds"
    )
    parser.add_argument(
        "--bare",
        action="store_true",
        help="bare DBOS workflows parked in recv_async instead of helix runs: DBOS's floor",
    )
    parser.add_argument(
        "--per-waiter-recheck",
        action="store_true",
        help="each waiting recv re-checks the database on its own timer (DBOS's way), "
        "not helix's one shared re-check: the A side of an A/B",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=0.0,
        help="seconds to wait, all runs waiting, before measuring memory and idle CPU "
        "(past --park-after, every wait beyond those in memory has parked)",
    )
    parser.add_argument(
        "--in-memory",
        type=int,
        help="HelixDBOS(waiting_runs_in_memory=...): waits kept with their coroutine",
    )
    parser.add_argument(
        "--park-after",
        type=float,
        help="HelixDBOS(park_waiting_runs_after_seconds=...): a longer wait is parked",
    )
    parser.add_argument(
        "--pyinstrument",
        metavar="PREFIX",
        help="also profile the start and drain phases into PREFIX-start.txt, PREFIX-drain.txt",
    )
    parser.add_argument(
        "--database-url",
        help="PostgreSQL server (default $HELIX_BENCH_DATABASE_URL, else embedded)",
    )
    args = parser.parse_args(argv)
    if args.runs < 1 or args.concurrency < 1:
        parser.error("--runs and --concurrency must be >= 1")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
