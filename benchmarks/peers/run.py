"""The peer benchmark: helix_dbos against other durable agent stacks, one workload,
one PostgreSQL, interleaved sittings, medians.

usage: .venv/bin/python -m benchmarks.peers [--quick] [--systems a,b,...] [--server URL]

Workload (every system scripted the same way): N = 21 model calls per run, 20 of them
asking for one immediate tool call (`ping(i)`), the last one giving the structured
output `Answer(count, text)`. Each system runs in a worker process of its own, on a
database of its own (`helix_bench_peers_<system>`, dropped and created anew), and the
sittings go round-robin (A B C ... A B C ...), so slow phases of a shared machine hit
every system alike. See benchmarks/peers/README.md for what each figure means.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.peers.common import CRASH_KILL_AT, CRASH_STEPS, RESULT_PREFIX

REPO = Path(__file__).resolve().parents[2]
DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"


@dataclass(frozen=True)
class Peer:
    name: str
    label: str
    module: str
    flags: tuple[str, ...] = ()
    crash: bool = True


PEERS = [
    Peer("bare", "bare DBOS (N trivial steps)", "bare_worker", crash=False),
    Peer("helix", "helix_dbos (MockLLM)", "helix_worker"),
    Peer("pydantic_ai", "pydantic-ai + DBOSDurability, tool as DBOS step", "pydantic_ai_worker"),
    Peer(
        "pydantic_ai_dbosagent",
        "pydantic-ai DBOSAgent (deprecated wrapper), tool as DBOS step",
        "pydantic_ai_worker",
        ("--wrapper",),
    ),
    Peer(
        "openai_agents",
        "OpenAI Agents + dbos-openai-agents, tool as DBOS step",
        "openai_agents_worker",
    ),
    Peer("langgraph", "LangGraph + PostgresSaver (durability async, default)", "langgraph_worker"),
    Peer(
        "langgraph_sync",
        "LangGraph + PostgresSaver (durability sync)",
        "langgraph_worker",
        ("--sync",),
    ),
]
BY_NAME = {p.name: p for p in PEERS}


# --- databases ---------------------------------------------------------------------


def with_database(server: str, name: str) -> str:
    base, _, _ = server.rpartition("/")
    return f"{base}/{name}"


def fresh_database(server: str, name: str) -> str:
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return with_database(server, name)


def drop_database(server: str, name: str) -> None:
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')


# --- workers -----------------------------------------------------------------------


def worker_command(peer: Peer, *args: str) -> list[str]:
    return [sys.executable, "-m", f"benchmarks.peers.{peer.module}", *args, *peer.flags]


class Worker:
    """A long-lived worker process: one JSON command a line in, one result a line out."""

    def __init__(self, peer: Peer, database_url: str, log_dir: Path) -> None:
        self.peer = peer
        self.stderr = open(log_dir / f"{peer.name}.stderr", "w")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            worker_command(peer, "serve", database_url),
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(RESULT_PREFIX):
                self.lines.put(line[len(RESULT_PREFIX) :])
        self.lines.put(None)

    def result(self, timeout: float) -> dict[str, Any]:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError(f"{self.peer.name}: no answer in {timeout:.0f} s") from None
        if line is None:
            raise RuntimeError(
                f"{self.peer.name}: worker exited ({self.proc.poll()}); see {self.stderr.name}"
            )
        out: dict[str, Any] = json.loads(line)
        if "error" in out:
            raise RuntimeError(f"{self.peer.name}: {out['error']}")
        return out

    def send(self, cmd: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.send({"cmd": "quit"})
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.stderr.close()


# --- figures -----------------------------------------------------------------------


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


@dataclass
class Figures:
    """One system's figures in one sitting."""

    step_ms: float  # run time / N (bare: the steps' time inside the workflow / N)
    steady_ms: float  # median time between consecutive model calls
    run_ms: float  # median N-step run, caller's view
    run1_ms: float  # median 1-step run
    # the run outside its model calls (issue 15's "fixed part"): from the call that starts
    # the run to the first model call, plus from the last model call to the result
    fixed_ms: float
    start_ms: float  # its first part: start to the first model call
    end_ms: float  # its second part: the last model call to the result in the caller's hands
    intercept_ms: float  # intercept of run time over steps, from the 1-step and N-step runs
    slope_ms: float
    # history size: (run / N ms, steady ms, WAL bytes without full-page images / N)
    hist: dict[int, tuple[float, float, float]] = field(default_factory=dict)
    wal_step: float = float("nan")  # WAL bytes of an N-step run / N, full-page images left out
    wal_step_fpi: float = float("nan")  # the same with them
    wal_marginal: float = float("nan")  # (WAL of an N-step run - of a 1-step run) / (N - 1)
    wal_isolated: bool = True
    ratio: float = float("nan")  # step_ms / bare step_ms of the same sitting
    ratio_steady: float = float("nan")


def _last_call_to_result_s(run: dict[str, Any]) -> float:
    return float(run["total_s"] - run["first_call_s"] - sum(run["intervals_s"]))


def figures(runs: list[dict[str, Any]], steps: int, bare: bool) -> Figures:
    fresh = [r for r in runs if r["history"] == 0]
    long = [r for r in fresh if r["steps"] == steps]
    one = [r for r in fresh if r["steps"] == 1]
    t_n = med([r["total_s"] * 1000 for r in long])
    t_1 = med([r["total_s"] * 1000 for r in one])
    slope = (t_n - t_1) / (steps - 1)
    # bare DBOS: the steps' time inside the workflow, as in bench_agent_loop.py
    step = med([r["inside_s"] * 1000 for r in long]) / steps if bare else t_n / steps
    start = med([r["first_call_s"] * 1000 for r in long])
    end = med([_last_call_to_result_s(r) * 1000 for r in long])
    fig = Figures(
        step_ms=step,
        steady_ms=med([med(r["intervals_s"]) * 1000 for r in long]),
        run_ms=t_n,
        run1_ms=t_1,
        fixed_ms=med([(r["first_call_s"] + _last_call_to_result_s(r)) * 1000 for r in long]),
        start_ms=start,
        end_ms=end,
        intercept_ms=t_1 - slope,
        slope_ms=slope,
    )
    for size in sorted({r["history"] for r in runs if r["history"]}):
        hist = [r for r in runs if r["history"] == size]
        fig.hist[size] = (
            med([r["total_s"] * 1000 / r["steps"] for r in hist]),
            med([med(r["intervals_s"]) * 1000 for r in hist]),
            med([(r["wal_bytes"] - r["wal_fpi"]) / r["steps"] for r in hist]),
        )
    w_n = med([r["wal_bytes"] - r["wal_fpi"] for r in long])
    w_1 = med([r["wal_bytes"] - r["wal_fpi"] for r in one])
    fig.wal_step = w_n / steps
    fig.wal_step_fpi = med([r["wal_bytes"] for r in long]) / steps
    fig.wal_marginal = (w_n - w_1) / (steps - 1)
    fig.wal_isolated = all(r["wal_isolated"] for r in runs)
    return fig


# --- the SIGKILL check -------------------------------------------------------------


def crash_check(peer: Peer, server: str, log_dir: Path) -> dict[str, Any]:
    """Start the crash workload (tool: log start, sleep, log end), SIGKILL the process
    while tool call CRASH_KILL_AT sleeps, relaunch, and count the tool calls that had
    completed before the kill and ran again after it."""
    db_name = f"helix_bench_peers_{peer.name}_crash"
    database_url = fresh_database(server, db_name)
    log = log_dir / f"{peer.name}.crash.log"
    log.write_text("")
    env = {**os.environ, "PEERS_CRASH_LOG": str(log)}
    stderr = open(log_dir / f"{peer.name}.crash.stderr", "w")  # noqa: SIM115
    out: dict[str, Any] = {"system": peer.name}
    try:
        proc = subprocess.Popen(
            worker_command(peer, "crash-start", database_url),
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        started: queue.Queue[str] = queue.Queue()

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith(RESULT_PREFIX):
                    started.put(json.loads(line[len(RESULT_PREFIX) :])["started"])

        threading.Thread(target=read, daemon=True).start()
        run_id = started.get(timeout=120)
        deadline = time.monotonic() + 120
        while True:
            lines = log.read_text().splitlines()
            ends = [ln for ln in lines if ln.startswith("end ")]
            if len(ends) >= CRASH_KILL_AT and any(
                ln.startswith(f"start {CRASH_KILL_AT} ") for ln in lines
            ):
                break
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(
                    f"{peer.name}: the crash run did not reach tool call {CRASH_KILL_AT}"
                )
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        killed_at = len(log.read_text().splitlines())
        recover = subprocess.run(
            worker_command(peer, "crash-recover", database_url, run_id),
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        stderr.write(recover.stderr)
        result_lines = [
            ln[len(RESULT_PREFIX) :]
            for ln in recover.stdout.splitlines()
            if ln.startswith(RESULT_PREFIX)
        ]
        outcome = json.loads(result_lines[-1]) if result_lines else {"status": "worker failed"}
        lines = log.read_text().splitlines()
        before, after = lines[:killed_at], lines[killed_at:]
        completed = {ln.split()[1] for ln in before if ln.startswith("end ")}
        interrupted = {ln.split()[1] for ln in before if ln.startswith("start ")} - completed
        starts_after = [ln.split()[1] for ln in after if ln.startswith("start ")]
        out.update(
            completed_before_kill=len(completed),
            completed_reran=sum(1 for i in starts_after if i in completed),
            interrupted_reran=sum(1 for i in starts_after if i in interrupted),
            tool_executions=sum(1 for ln in lines if ln.startswith("start ")),
            tool_calls=CRASH_STEPS - 1,
            status=outcome.get("status"),
            output=outcome.get("output"),
            note=outcome.get("note", ""),
        )
    except Exception as exc:
        out.update(error=f"{type(exc).__name__}: {exc}")
    finally:
        stderr.close()
        with contextlib.suppress(Exception):
            drop_database(server, db_name)
    return out


# --- report ------------------------------------------------------------------------


def fmt(value: float, digits: int = 1) -> str:
    return "n/a" if value != value else f"{value:.{digits}f}"  # NaN check


def summarize(
    per_sitting: dict[str, list[Figures]], sizes: list[int]
) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    helix_fixed = [f.fixed_ms for f in per_sitting.get("helix", [])]
    for name, figs in per_sitting.items():
        s: dict[str, float] = {
            "step_ms": med([f.step_ms for f in figs]),
            "ratio": med([f.ratio for f in figs]),
            "steady_ms": med([f.steady_ms for f in figs]),
            "ratio_steady": med([f.ratio_steady for f in figs]),
            "run_ms": med([f.run_ms for f in figs]),
            "run1_ms": med([f.run1_ms for f in figs]),
            "fixed_ms": med([f.fixed_ms for f in figs]),
            "start_ms": med([f.start_ms for f in figs]),
            "end_ms": med([f.end_ms for f in figs]),
            "intercept_ms": med([f.intercept_ms for f in figs]),
            "slope_ms": med([f.slope_ms for f in figs]),
            "wal_step": med([f.wal_step for f in figs]),
            "wal_step_fpi": med([f.wal_step_fpi for f in figs]),
            "wal_isolated": float(all(f.wal_isolated for f in figs)),
            "wal_marginal": med([f.wal_marginal for f in figs]),
        }
        if helix_fixed and len(helix_fixed) == len(figs):
            s["fixed_vs_helix"] = med(
                [f.fixed_ms / h for f, h in zip(figs, helix_fixed, strict=True)]
            )
        if len(sizes) == 2 and all(sizes[0] in f.hist and sizes[1] in f.hist for f in figs):
            lo, hi = sizes
            s[f"step_ms_{lo}"] = med([f.hist[lo][0] for f in figs])
            s[f"step_ms_{hi}"] = med([f.hist[hi][0] for f in figs])
            s["history_ratio"] = med([f.hist[hi][0] / f.hist[lo][0] for f in figs])
            s["history_ratio_steady"] = med([f.hist[hi][1] / f.hist[lo][1] for f in figs])
            s[f"wal_step_{hi}"] = med([f.hist[hi][2] for f in figs])
        out[name] = s
    return out


def crash_cell(c: dict[str, Any] | None) -> str:
    if c is None:
        return "not run"
    if "error" in c:
        return f"error: {c['error']}"
    cell = f"{c['completed_reran']} of {c['completed_before_kill']}"
    if c["status"] != "completed":
        cell += f" (run {c['status']})"
    return cell


def report(
    summary: dict[str, dict[str, float]],
    crashes: dict[str, dict[str, Any]],
    names: list[str],
    sizes: list[int],
    args: argparse.Namespace,
    sittings: int,
) -> str:
    lo, hi = sizes if len(sizes) == 2 else (10, 1000)
    lines = [
        f"Medians of {sittings} interleaved sittings; N = {args.steps} model calls per run "
        f"({args.steps - 1} tool steps + the structured output); {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.2f} at the end.",
        "",
        "| system | agent step, ms (run / N) | ÷ bare DBOS step | steady step, ms | ÷ bare | "
        "fixed part per run, ms (outside the model calls) | start to 1st call + last call "
        "to result, ms | fixed ÷ helix's | 1-step run, ms | intercept, ms | "
        "per-step slope, ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in names:
        s = summary[name]
        lines.append(
            f"| {BY_NAME[name].label} | {fmt(s['step_ms'], 2)} | {fmt(s['ratio'], 2)} | "
            f"{fmt(s['steady_ms'], 2)} | {fmt(s['ratio_steady'], 2)} | {fmt(s['fixed_ms'])} | "
            f"{fmt(s['start_ms'])} + {fmt(s['end_ms'])} | "
            f"{fmt(s.get('fixed_vs_helix', float('nan')), 2)} | {fmt(s['run1_ms'])} | "
            f"{fmt(s['intercept_ms'])} | {fmt(s['slope_ms'], 2)} |"
        )
    lines += [
        "",
        f"| system | step at {lo} msgs, ms | at {hi} msgs, ms | ÷ (run / N) | ÷ (steady) | "
        "WAL bytes per step (run / N) | with full-page images | per extra step | "
        f"per step at {hi} msgs | completed tool calls re-run after SIGKILL |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name in names:
        s = summary[name]
        lines.append(
            f"| {BY_NAME[name].label} | {fmt(s.get(f'step_ms_{lo}', float('nan')), 2)} | "
            f"{fmt(s.get(f'step_ms_{hi}', float('nan')), 2)} | "
            f"{fmt(s.get('history_ratio', float('nan')), 2)} | "
            f"{fmt(s.get('history_ratio_steady', float('nan')), 2)} | "
            f"{fmt(s['wal_step'], 0)}{'' if s['wal_isolated'] else ' (cluster-wide)'} | "
            f"{fmt(s['wal_step_fpi'], 0)} | {fmt(s['wal_marginal'], 0)} | "
            f"{fmt(s.get(f'wal_step_{hi}', float('nan')), 0)} | "
            f"{crash_cell(crashes.get(name)) if BY_NAME[name].crash else '-'} |"
        )
    notes = [c for c in crashes.values() if c.get("note")]
    if notes:
        lines += [
            "",
            "SIGKILL check (tool call i logs its start, sleeps, logs its end; killed while "
            f"call {CRASH_KILL_AT} slept, then relaunched):",
        ]
        for c in crashes.values():
            if "error" in c:
                lines.append(f"- {c['system']}: {c['error']}")
                continue
            lines.append(
                f"- {c['system']}: {c['completed_reran']} of {c['completed_before_kill']} completed "
                f"calls re-ran, the interrupted call ran again {c['interrupted_reran']}x, "
                f"{c['tool_executions']} executions for {c['tool_calls']} calls; run "
                f"{c['status']}, output {c['output']}; {c['note']}"
            )
    return "\n".join(lines)


def versions() -> dict[str, str]:
    out = {}
    for pkg in (
        "dbos",
        "pydantic-ai-slim",
        "openai-agents",
        "dbos-openai-agents",
        "langgraph",
        "langgraph-checkpoint-postgres",
        "langchain-core",
    ):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    with contextlib.suppress(Exception):
        out["helix_dbos commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()
    return out


def run_sittings(
    names: list[str],
    server: str,
    cmd: dict[str, Any],
    sittings: int,
    log_dir: Path,
    started: float,
) -> tuple[dict[str, list[Figures]], dict[str, list[Any]]]:
    """Start one worker per system, then go round: each sitting asks every system in
    turn (starting one further along each time) for one sitting's runs."""
    steps = int(cmd["steps"])
    workers: dict[str, Worker] = {}
    per_sitting: dict[str, list[Figures]] = {n: [] for n in names}
    raw: dict[str, list[Any]] = {n: [] for n in names}
    try:
        for name in names:
            db = fresh_database(server, f"helix_bench_peers_{name}")
            workers[name] = Worker(BY_NAME[name], db, log_dir)
        for name in names:  # launched together; each warms up before it says ready
            workers[name].result(timeout=300)
        print(f"workers ready after {time.monotonic() - started:.0f} s", flush=True)
        for sitting in range(sittings):
            order = names[sitting % len(names) :] + names[: sitting % len(names)]
            this: dict[str, Figures] = {}
            for name in order:
                workers[name].send(cmd)
                runs = workers[name].result(timeout=600)["runs"]
                raw[name].append(runs)
                this[name] = figures(runs, steps, bare=name == "bare")
            bare = this["bare"]
            for name, fig in this.items():
                fig.ratio = fig.step_ms / bare.step_ms
                fig.ratio_steady = fig.steady_ms / bare.steady_ms
                per_sitting[name].append(fig)
            print(
                f"sitting {sitting + 1}/{sittings} done ({time.monotonic() - started:.0f} s): "
                + ", ".join(f"{n} {f.step_ms:.1f} ms" for n, f in this.items()),
                flush=True,
            )
    finally:
        for w in workers.values():
            w.close()
    return per_sitting, raw


# --- main --------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 sittings, fewer runs (~3 min)")
    parser.add_argument("--sittings", type=int, help="rotations over all systems (default 6)")
    parser.add_argument("--repeats", type=int, help="N-step and 1-step runs per sitting (4)")
    parser.add_argument("--history-repeats", type=int, help="runs per history size per sitting (3)")
    parser.add_argument("--steps", type=int, default=21, help="model calls per run (default 21)")
    parser.add_argument("--history", default="10,1000", help="history sizes (default 10,1000)")
    parser.add_argument(
        "--systems",
        default=",".join(p.name for p in PEERS),
        help="comma-separated, from: " + ", ".join(p.name for p in PEERS),
    )
    parser.add_argument(
        "--server",
        default=os.environ.get("HELIX_BENCH_DATABASE_URL", DEFAULT_SERVER),
        help=f"PostgreSQL server (default $HELIX_BENCH_DATABASE_URL, else {DEFAULT_SERVER})",
    )
    parser.add_argument("--no-crash", action="store_true", help="skip the SIGKILL check")
    parser.add_argument("--json", metavar="PATH", help="also write every figure as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the databases afterwards")
    args = parser.parse_args(argv)
    quick = args.quick
    sittings = args.sittings or (2 if quick else 6)
    repeats = args.repeats or (2 if quick else 4)
    history_repeats = args.history_repeats or (1 if quick else 3)
    sizes = [int(s) for s in args.history.split(",") if s]
    names = [n.strip() for n in args.systems.split(",") if n.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        parser.error(f"unknown systems: {unknown}")
    if "bare" not in names:
        names.insert(0, "bare")  # every ratio needs it
    if args.steps < 3:
        parser.error("--steps must be at least 3")

    log_dir = Path(tempfile.mkdtemp(prefix="helix-peers-"))
    print(f"peer benchmark: {', '.join(names)}; logs in {log_dir}", flush=True)
    print(json.dumps(versions()), flush=True)
    started = time.monotonic()
    cmd = {
        "cmd": "sitting",
        "steps": args.steps,
        "repeats": repeats,
        "history": sizes,
        "history_repeats": history_repeats,
    }
    per_sitting, raw = run_sittings(names, args.server, cmd, sittings, log_dir, started)
    crashes: dict[str, dict[str, Any]] = {}
    if not args.no_crash:
        for name in names:
            if BY_NAME[name].crash:
                crashes[name] = crash_check(BY_NAME[name], args.server, log_dir)
                print(f"SIGKILL check {name}: {crash_cell(crashes[name])}", flush=True)
    if not args.keep:
        for name in names:
            drop_database(args.server, f"helix_bench_peers_{name}")
    summary = summarize(per_sitting, sizes)
    print()
    print(report(summary, crashes, names, sizes, args, sittings))
    print(f"\n(total {time.monotonic() - started:.0f} s)")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "versions": versions(),
                    "summary": summary,
                    "per_sitting": {
                        n: [f.__dict__ for f in figs] for n, figs in per_sitting.items()
                    },
                    "crash": crashes,
                    "raw": raw,
                },
                default=str,
            )
        )


if __name__ == "__main__":
    main()
