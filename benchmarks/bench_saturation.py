"""Throughput at saturation: agent steps per second with many sessions at once.

One fresh database, one sitting:

1. In this process (one worker): `--sessions` sessions, each running `--steps`-step
   runs back to back (a `MockLLM` calls the instant tool `ping` steps-1 times, then
   answers). Against it, the same shape as bare DBOS workflows: per agent step one
   "LLM-like" `@DBOS.step` and one tool `@DBOS.step` (the final step has no tool call,
   as the agent's), `--sessions` workflows at a time, back to back. The two alternate
   `--rounds` times; each phase counts the model calls (one per agent step) in a window
   of `--seconds` after `--warmup` seconds of ramp-up.
2. Real worker processes on the same database (this file, `--child`): one process with
   all sessions, then two with half each, started together; steps/s over the window
   they share. The same for bare DBOS processes (the shape above, in processes that
   launch the same `HelixDBOS` but drive only bare workflows): what two processes can
   gain on this machine at all, measured in the same sitting.

Per phase it also reports this process's CPU per agent step, the local PostgreSQL's
(its postmaster and backends, from /proc; the ramp-up and drain included), and how
many connections were opened (pg_stat_database.sessions), which are steadier than
steps/s on a shared box. `--py-spy PATH` records where the GIL goes (every thread)
during one more helix phase (`pip install py-spy`).

usage: .venv/bin/python benchmarks/bench_saturation.py [--sessions 200] [--database-url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
from bench_agent_loop import fresh_database, server_url
from bench_common import cpu_seconds, percentile, rounded
from dbos import DBOS

import helix_dbos
from helix_dbos import Agent, HelixDBOS, MockLLM, tool
from helix_dbos.orchestration.types import LLMRequest
from helix_dbos.store.database import libpq_url, redact_url

AGENT_NAME = "sat_agent"
STAMPS: list[float] = []  # perf_counter of every model call / LLM-like step, this process


# --- the bare DBOS shape (registered at import, before DBOS.launch) --------------------


@DBOS.step(name="sat.llm_like")
async def llm_like_step(i: int, steps: int) -> dict[str, Any]:
    STAMPS.append(time.perf_counter())
    if i < steps - 1:
        return {"type": "tool_calls", "tool_calls": [{"id": f"t{i}", "name": "ping"}]}
    return {"type": "text", "content": "done"}


@DBOS.step(name="sat.tool")
async def tool_like_step(call_id: str) -> str:
    return "pong"


@DBOS.workflow(name="sat.bare_run")
async def bare_run(steps: int) -> int:
    for i in range(steps):
        reply = await llm_like_step(i, steps)
        if reply["type"] == "tool_calls":
            await tool_like_step(reply["tool_calls"][0]["id"])
    return steps


# --- the agent -------------------------------------------------------------------------


@tool
async def ping() -> str:
    """Answers at once."""
    return "pong"


def make_responder(steps: int) -> Callable[[LLMRequest], dict[str, Any]]:
    def respond(request: LLMRequest) -> dict[str, Any]:
        STAMPS.append(time.perf_counter())
        last_user = max(i for i, m in enumerate(request.messages) if m.role == "user")
        done = sum(1 for m in request.messages[last_user:] if m.role == "assistant")
        if done < steps - 1:
            call = {"id": f"t{uuid.uuid4().hex[:12]}", "name": "ping", "arguments": {}}
            return {"type": "tool_calls", "tool_calls": [call]}
        return {"type": "text", "content": "done"}

    return respond


def build_helix(
    database_url: str, steps: int, executor_id: str, pool_size: int = 20
) -> tuple[HelixDBOS, MockLLM]:
    mock = MockLLM(make_responder(steps))
    agent = Agent(AGENT_NAME, system_prompt="You ping.", tools=[ping], max_steps=steps + 5)
    helix = HelixDBOS(
        [agent],
        database_url=database_url,
        llm=mock,
        executor_id=executor_id,
        application_version="helix-bench-saturation",
        pool_size=pool_size,
    )
    return helix, mock


# --- driving a phase -------------------------------------------------------------------


async def drive(
    one_run: Callable[[int], Awaitable[None]],
    sessions: int,
    warmup: float,
    seconds: float,
    on_tick: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """`sessions` loops of back-to-back runs; count STAMPS in [start+warmup, +seconds]."""
    STAMPS.clear()
    stop = asyncio.Event()
    failures: list[str] = []
    runs = [0]

    async def session(i: int) -> None:
        while not stop.is_set():
            try:
                await one_run(i)
                runs[0] += 1
            except Exception as exc:  # counted and reported: a saturated run must not fail
                failures.append(f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(0.5)

    started = time.perf_counter()
    tasks = [asyncio.create_task(session(i)) for i in range(sessions)]
    await asyncio.sleep(warmup)
    lo, cpu0 = time.perf_counter(), cpu_seconds()
    wall_lo = time.time()
    while time.perf_counter() - lo < seconds:
        await asyncio.sleep(0.5)
        if on_tick is not None:
            on_tick()
    hi, cpu1 = time.perf_counter(), cpu_seconds()
    stop.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 300)
    steps = sum(1 for t in STAMPS if lo <= t < hi)
    return {
        "steps_per_s": steps / (hi - lo),
        "steps_in_window": steps,
        "window_s": hi - lo,
        "ramp_s": lo - started,
        "runs_completed": runs[0],
        "failures": len(failures),
        "first_failure": failures[0] if failures else "",
        "cpu_s_per_s": (cpu1 - cpu0) / (hi - lo),
        "wall_lo": wall_lo,
        "wall_hi": wall_lo + (hi - lo),
        "stamps_wall": [wall_lo + (t - lo) for t in STAMPS],
    }


class InProcess:
    """One worker: helix and the bare DBOS shape in this process, on this loop."""

    def __init__(self, helix: HelixDBOS, mock: MockLLM, args: argparse.Namespace) -> None:
        self.helix, self.mock, self.args = helix, mock, args
        self.session_ids: dict[int, str] = {}
        self.start_s: list[float] = []  # execute() call -> return, per run
        self.rest_s: list[float] = []  # execute() returned -> result(), per run

    async def agent_run(self, i: int) -> None:
        began = time.perf_counter()
        session_id = None if self.args.fresh_sessions else self.session_ids.get(i)
        handle = await self.helix.execute(AGENT_NAME, "go", session_id=session_id)
        started = time.perf_counter()
        self.session_ids[i] = handle.session_id
        result = await handle.result()
        self.start_s.append(started - began)
        self.rest_s.append(time.perf_counter() - started)
        if result.status != "completed" or result.step_count != self.args.steps:
            raise RuntimeError(f"run did not complete as scripted: {result.status}")

    async def bare_run(self, i: int) -> None:
        handle = await DBOS.start_workflow_async(bare_run, self.args.steps)
        if await handle.get_result() != self.args.steps:
            raise RuntimeError("bare run did not complete")

    async def phase(self, kind: str) -> dict[str, Any]:
        a = self.args
        run = self.agent_run if kind == "helix" else self.bare_run
        self.start_s, self.rest_s = [], []
        url = self.helix.database_url
        opened, pg_cpu = sessions_opened(url), postgres_cpu_seconds(url)
        row = await drive(run, a.sessions, a.warmup, a.seconds, on_tick=self.mock.inputs.clear)
        row["connections_opened"] = sessions_opened(url) - opened
        # per measured step; the ramp-up and the drain are in the PostgreSQL figure too
        steps_all = len(STAMPS)
        row["pg_cpu_ms_per_step"] = (postgres_cpu_seconds(url) - pg_cpu) / steps_all * 1000
        row["cpu_ms_per_step"] = row["cpu_s_per_s"] / row["steps_per_s"] * 1000
        if kind == "helix":
            row["execute_ms_p50_p90"] = [percentile(self.start_s, p) * 1000 for p in (50, 90)]
            row["rest_of_run_ms_p50_p90"] = [percentile(self.rest_s, p) * 1000 for p in (50, 90)]
        return row


def postgres_cpu_seconds(database_url: str) -> float:
    """CPU seconds of the (local) PostgreSQL server: its postmaster, its live backends
    and the backends it has reaped (cutime/cstime). 0.0 when it is not on this host."""
    with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
    try:
        stat = Path(f"/proc/{row[0] if row else 0}/stat").read_text()
        postmaster = int(stat.rsplit(")", 1)[1].split()[1])
        ticks = os.sysconf("SC_CLK_TCK")

        def fields(pid: int | str) -> list[str]:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()

        main = fields(postmaster)
        total = sum(int(x) for x in main[11:15])  # utime stime cutime cstime
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and entry.name != str(postmaster):
                with contextlib.suppress(OSError, IndexError):
                    f = fields(entry.name)
                    if int(f[1]) == postmaster:
                        total += int(f[11]) + int(f[12])
        return total / ticks
    except (OSError, ValueError, IndexError):
        return 0.0


def sessions_opened(database_url: str) -> int:
    """Connections ever opened to the database (PostgreSQL 14+ counts them)."""
    with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT sessions FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else 0


# --- worker processes ------------------------------------------------------------------


async def child_main(args: argparse.Namespace) -> None:
    """One worker process: its own HelixDBOS on the shared database; waits for the go
    file, drives its sessions (agent runs, or bare DBOS workflows with `--child-kind
    bare`), prints one JSON line (stamps in epoch seconds)."""
    database_url, sessions, go = args.child[0], int(args.child[1]), Path(args.child[2])
    executor = f"sat-{uuid.uuid4().hex[:8]}"
    helix, mock = build_helix(database_url, args.steps, executor, args.worker_pool_size)
    helix.launch()
    print("ready", flush=True)
    while not go.exists():
        await asyncio.sleep(0.01)
    bench = InProcess(helix, mock, args)
    one_run = bench.bare_run if args.child_kind == "bare" else bench.agent_run
    try:
        row = await drive(one_run, sessions, args.warmup, args.seconds, mock.inputs.clear)
    finally:
        helix.shutdown()
    print(json.dumps(row), flush=True)


async def _figures_line(child: asyncio.subprocess.Process) -> dict[str, Any]:
    """The worker's figures: its first stdout line that is a JSON object (others are logs)."""
    assert child.stdout is not None
    while True:
        line = await asyncio.wait_for(child.stdout.readline(), 600)
        if not line:
            raise RuntimeError("worker process ended without its figures")
        with contextlib.suppress(ValueError):
            figures = json.loads(line)
            if isinstance(figures, dict):
                return figures
        print(f"worker process: {line[:200]!r}", file=sys.stderr)


async def workers_phase(
    database_url: str, counts: list[int], args: argparse.Namespace, kind: str = "helix"
) -> dict:
    """`len(counts)` worker processes (`kind`: helix or bare) with counts[i] sessions
    each, started together."""
    go = Path(tempfile.mkdtemp(prefix="sat-go-")) / "go"
    cmd = [sys.executable, str(Path(__file__).resolve())]
    opts = [
        *(["--fresh-sessions"] if args.fresh_sessions else []),
        *("--worker-pool-size", str(args.worker_pool_size)),
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--seconds",
        str(args.seconds),
        "--child-kind",
        kind,
    ]
    children = [
        await asyncio.create_subprocess_exec(
            *cmd,
            *opts,
            "--child",
            database_url,
            str(n),
            str(go),
            stdout=asyncio.subprocess.PIPE,
            limit=1 << 26,  # a worker's log lines can be long: only its JSON line is read
        )
        for n in counts
    ]
    try:
        for child in children:
            assert child.stdout is not None
            line = await asyncio.wait_for(child.stdout.readline(), 120)
            if line.strip() != b"ready":
                raise RuntimeError(f"worker process: {line!r}")
        go.touch()
        rows = [await _figures_line(child) for child in children]
    finally:
        for child in children:
            if child.returncode is None:
                await asyncio.wait_for(child.wait(), 60)
    lo = max(r["wall_lo"] for r in rows)  # the window every process was in
    hi = min(r["wall_hi"] for r in rows)
    steps = sum(1 for r in rows for t in r["stamps_wall"] if lo <= t < hi)
    return {
        "kind": kind,
        "processes": len(counts),
        "sessions": sum(counts),
        "steps_per_s": steps / (hi - lo),
        "window_s": hi - lo,
        "per_process_steps_per_s": [r["steps_per_s"] for r in rows],
        "runs_completed": sum(r["runs_completed"] for r in rows),
        "failures": sum(r["failures"] for r in rows),
        "cpu_s_per_s": [r["cpu_s_per_s"] for r in rows],
    }


# --- the sitting -----------------------------------------------------------------------


async def measure(database_url: str, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"helix": [], "bare": []}
    if args.workers_only:
        await measure_workers(database_url, args, out)
        return out
    helix, mock = build_helix(database_url, args.steps, f"sat-{uuid.uuid4().hex[:8]}")
    helix.launch()  # on this loop
    try:
        bench = InProcess(helix, mock, args)
        # warm-up: a few runs of each
        await drive(bench.agent_run, 4, 1.0, 1.0)
        await drive(bench.bare_run, 4, 1.0, 1.0)
        for r in range(args.rounds):
            order = ["helix", "bare"] if r % 2 == 0 else ["bare", "helix"]
            for kind in order:
                row = await bench.phase(kind)
                row.pop("stamps_wall")
                out[kind].append(row)
                extra = {
                    k: v
                    for k, v in row.items()
                    if k.endswith(("p50_p90", "per_step")) or k.startswith("conn")
                }
                print(f"  {kind:<6} {row['steps_per_s']:8.1f} steps/s {rounded(extra)}", flush=True)
        if args.py_spy:  # where the GIL goes (every thread), one more helix phase
            spy = await asyncio.create_subprocess_exec(
                str(Path(sys.executable).parent / "py-spy"),
                *("record", "--pid", str(os.getpid()), "--gil", "--nonblocking", "--rate", "200"),
                *("--format", "raw", "-o", args.py_spy, "-d", str(int(args.warmup + args.seconds))),
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
            row = await bench.phase("helix")
            await spy.wait()
            row.pop("stamps_wall")
            out["helix_py_spy"] = row
            print(f"py-spy (GIL holders, raw stacks) of one helix phase: {args.py_spy}", flush=True)
    finally:
        helix.shutdown()
    if not args.skip_workers:
        await measure_workers(database_url, args, out)
    return out


async def measure_workers(database_url: str, args: argparse.Namespace, out: dict) -> None:
    if args.workers_only:  # the database is migrated by the first HelixDBOS launched on it
        helix, _ = build_helix(database_url, args.steps, f"sat-{uuid.uuid4().hex[:8]}")
        helix.launch()
        helix.shutdown()
    half = args.sessions // 2
    for kind in ("helix", "bare"):
        for counts in ([args.sessions], [half, args.sessions - half]):
            row = await workers_phase(database_url, counts, args, kind)
            out.setdefault("workers" if kind == "helix" else "bare_workers", []).append(row)
            print(
                f"  {len(counts)} {kind} worker(s): {row['steps_per_s']:8.1f} steps/s", flush=True
            )


def summary(out: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    if out["helix"]:
        helix = statistics.median(r["steps_per_s"] for r in out["helix"])
        bare = statistics.median(r["steps_per_s"] for r in out["bare"])
        result = {"helix_steps_per_s": helix, "bare_steps_per_s": bare, "ratio": helix / bare}
    if "workers" in out:
        one, two = out["workers"]
        result["one_worker_process"] = one["steps_per_s"]
        result["two_worker_processes"] = two["steps_per_s"]
        result["two_over_one"] = two["steps_per_s"] / one["steps_per_s"]
    if "bare_workers" in out:
        one, two = out["bare_workers"]
        result["bare_one_process"] = one["steps_per_s"]
        result["bare_two_processes"] = two["steps_per_s"]
        result["bare_two_over_one"] = two["steps_per_s"] / one["steps_per_s"]
    return result


async def run(args: argparse.Namespace) -> None:
    server, kind = server_url(args.database_url)
    load = os.getloadavg()
    with fresh_database(server) as database_url:
        out = await measure(database_url, args)
    s = summary(out)
    print(f"\nhelix_dbos saturation, database: {kind} ({redact_url(server)})")
    print(f"code: {Path(helix_dbos.__file__).parent}; cores {os.cpu_count()}; load at start {load}")
    print(f"{args.sessions} sessions x {args.steps}-step runs, window {args.seconds} s")
    print(f"  {'':<8} " + " ".join(f"{'round ' + str(i + 1):>10}" for i in range(args.rounds)))
    for kind_ in ("helix", "bare") if out["helix"] else ():
        cells = " ".join(f"{r['steps_per_s']:>10.1f}" for r in out[kind_])
        print(f"  {kind_:<8} {cells}   steps/s")
    for kind_ in ("helix", "bare") if out["helix"] else ():
        rows = out[kind_]
        print(
            f"  {kind_:<8} per step: this process "
            f"{statistics.median(r['cpu_ms_per_step'] for r in rows):.2f} ms CPU, PostgreSQL "
            f"{statistics.median(r['pg_cpu_ms_per_step'] for r in rows):.2f} ms CPU; "
            f"connections opened per step "
            f"{statistics.median(r['connections_opened'] / r['steps_in_window'] for r in rows):.2f}"
        )
    if "ratio" in s:
        print(
            f"  median: helix {s['helix_steps_per_s']:.1f} / bare DBOS "
            f"{s['bare_steps_per_s']:.1f} steps/s = ratio {s['ratio']:.2f}"
        )
    if "workers" in out:
        print(
            f"  worker processes: one {s['one_worker_process']:.1f}, two "
            f"{s['two_worker_processes']:.1f} steps/s (x{s['two_over_one']:.2f})"
        )
    if "bare_workers" in out:
        print(
            f"  bare DBOS processes: one {s['bare_one_process']:.1f}, two "
            f"{s['bare_two_processes']:.1f} steps/s (x{s['bare_two_over_one']:.2f})"
        )
    print("\n" + json.dumps(rounded({"summary": s, "load_at_start": load, **out})))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=200, help="concurrent sessions (200)")
    parser.add_argument("--steps", type=int, default=5, help="agent steps per run (5)")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured window (20)")
    parser.add_argument("--warmup", type=float, default=5.0, help="ramp-up before it (5)")
    parser.add_argument("--rounds", type=int, default=2, help="helix/bare alternations (2)")
    parser.add_argument(
        "--fresh-sessions", action="store_true", help="a new session per run (not turns)"
    )
    parser.add_argument("--workers-only", action="store_true", help="only the processes")
    parser.add_argument(
        "--worker-pool-size",
        type=int,
        default=8,
        help="each worker process's pool_size (8: two fit in 100 connections)",
    )
    parser.add_argument("--skip-workers", action="store_true", help="no worker processes")
    parser.add_argument("--py-spy", metavar="PATH", help="py-spy --gil one more helix phase")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--child-kind", default="helix", help=argparse.SUPPRESS)
    parser.add_argument(
        "--database-url",
        help="PostgreSQL server (default $HELIX_BENCH_DATABASE_URL, else embedded)",
    )
    args = parser.parse_args(argv)
    asyncio.run(child_main(args) if args.child else run(args))


if __name__ == "__main__":
    main()
