"""Many workers on one database: how fast a dead worker's runs move, and how many short
runs a fleet of 1, 2 and 4 worker processes drains.

Real processes (benchmarks/fleet_app.py), real SIGKILLs, one PostgreSQL server:

1. Recovery. For each lease in --leases: one survivor worker (`helix-dbos worker`) stays
   up; --kills times, a victim process starts --victim-runs runs itself, their tool calls
   block, and the victim is SIGKILLed. Timed from the kill (wall clock): the claim (the
   survivor's `recovered_at` in helix.workers), the first and last of the runs executing a
   step on the survivor (their tool's marker lines), and all of them completed.
2. Throughput. A front process with `executes_runs=False` enqueues --runs runs (tool call,
   then `__finish__`) while no worker runs; then 1, 2 and 4 worker processes start at one
   signal and drain them; and once more 4 workers, one SIGKILLed when half the runs are
   done. Every configuration asserts that each run completed exactly once: `completed` in
   helix.runs, SUCCESS in dbos.workflow_status, one tool result and one assistant finish in
   its transcript, and one execution of its tool by the marker lines (plus, after a kill,
   executions the dead worker began but never checkpointed; the run's kept result must
   come from a survivor then).

The throughput runs use a RunQueue with a per-worker concurrency: on the agent's own
queue (no limit) the first worker to poll claims the whole backlog. The front keeps at
most --front-concurrency execute() calls in flight with a pool as large: more than twice
a process's pool in concurrent execute() calls hangs it (each call holds a connection for
its start lock while it waits for a second one).

usage: .venv/bin/python benchmarks/bench_workers.py [--runs 1000] [--database-url URL]

A fresh database per configuration (`helix_bench_<random>`) on the server, dropped at
the end. Prints tables, then one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from bench_agent_loop import fresh_database
from bench_common import rounded

from helix_dbos.store.database import libpq_url, redact_url
from helix_dbos.store.migrations import apply_migrations

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
APP = HERE / "fleet_app.py"
DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
WORKFLOW_PREFIX = "helix-"


# --- processes ----------------------------------------------------------------------


@dataclass
class Fleet:
    """The processes of one configuration, their settings and their marker files."""

    database_url: str
    lease: float
    workdir: Path
    worker_concurrency: int | None = None
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    killed: dict[int, float] = field(default_factory=dict)  # pid -> wall time of SIGKILL

    def env(self, **extra: str) -> dict[str, str]:
        env = {
            **os.environ,
            "FLEET_DATABASE_URL": self.database_url,
            "FLEET_MARKERS": str(self.workdir),
            "FLEET_LEASE": f"{self.lease:g}",
            "PYTHONUNBUFFERED": "1",
        }
        env.pop("FLEET_GO", None)
        env.pop("FLEET_WORKER_CONCURRENCY", None)
        if self.worker_concurrency:
            env["FLEET_WORKER_CONCURRENCY"] = str(self.worker_concurrency)
        env.update(extra)
        return env

    def spawn(self, args: list[str], name: str, **env: str) -> subprocess.Popen[bytes]:
        log = open(self.workdir / f"{name}.stderr", "wb")  # noqa: SIM115 - owned by the child
        proc = subprocess.Popen(
            args, cwd=REPO, env=self.env(**env), stdout=subprocess.PIPE, stderr=log
        )
        log.close()
        self.procs.append(proc)
        return proc

    def worker(self, name: str, **env: str) -> subprocess.Popen[bytes]:
        app = f"{APP.relative_to(REPO)}:worker"
        args = [sys.executable, "-m", "helix_dbos.cli", "worker", "--app", app]
        return self.spawn(args, name, **env)

    def front(self, runs: int, prefix: str, concurrency: int) -> dict[str, Any]:
        proc = self.spawn(
            [sys.executable, str(APP), "front", str(runs)],
            "front",
            FLEET_TAG_PREFIX=prefix,
            FLEET_CONCURRENCY=str(concurrency),
            # More than twice the pool in concurrent execute() calls hangs the process
            # (each call holds a connection for its start lock while it waits for another).
            FLEET_POOL=str(concurrency),
        )
        ready = json.loads(self.readline(proc, "front"))
        done = json.loads(self.readline(proc, "front", timeout=600))
        proc.wait(timeout=120)
        return {**ready, **done}

    def victim(self, runs: int, prefix: str) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
        proc = self.spawn(
            [sys.executable, str(APP), "victim", str(runs)],
            f"victim-{prefix}",
            FLEET_ROLE="victim",
            FLEET_TAG_PREFIX=prefix,
        )
        return proc, json.loads(self.readline(proc, f"victim-{prefix}"))

    def readline(self, proc: subprocess.Popen[bytes], name: str, timeout: float = 120) -> str:
        assert proc.stdout is not None
        deadline = time.monotonic() + timeout
        os.set_blocking(proc.stdout.fileno(), False)
        buffer = b""
        while time.monotonic() < deadline:
            chunk = proc.stdout.readline()
            if chunk:
                buffer += chunk
                if buffer.endswith(b"\n"):
                    return buffer.decode()
                continue
            if proc.poll() is not None:
                break
            time.sleep(0.02)
        raise RuntimeError(f"{name} printed nothing (exit {proc.poll()}): {self.stderr(name)}")

    def stderr(self, name: str) -> str:
        path = self.workdir / f"{name}.stderr"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def sigkill(self, proc: subprocess.Popen[bytes]) -> float:
        proc.send_signal(signal.SIGKILL)
        killed_at = time.time()
        proc.wait(timeout=30)
        self.killed[proc.pid] = killed_at
        return killed_at

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
            if proc.stdout is not None:
                proc.stdout.close()

    def check_alive(self, procs: list[subprocess.Popen[bytes]], names: list[str]) -> None:
        for proc, name in zip(procs, names, strict=True):
            if proc.pid not in self.killed and proc.poll() is not None:
                raise RuntimeError(
                    f"{name} (pid {proc.pid}) exited with code {proc.returncode}"
                    + (" (fenced: it lost its lease)" if proc.returncode == 75 else "")
                    + f": {self.stderr(name)}"
                )


@contextmanager
def fleet(server: str, lease: float, worker_concurrency: int | None = None) -> Iterator[Fleet]:
    with fresh_database(server) as url, tempfile.TemporaryDirectory(prefix="fleet-") as tmp:
        # Migrated beforehand, as an operator would (`helix-dbos migrate`, `dbos migrate`):
        # the first DBOS launch on an empty database creates its schema, which takes
        # seconds on this machine.
        apply_migrations(url)
        dbos_cli = Path(sys.executable).with_name("dbos")
        subprocess.run([dbos_cli, "migrate", "-s", libpq_url(url)], check=True, capture_output=True)
        f = Fleet(url, lease, Path(tmp), worker_concurrency)
        try:
            yield f
        finally:
            f.stop()


# --- database -------------------------------------------------------------------------


def sql(url: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        return conn.execute(query, params).fetchall()


def wait_for(what: str, check: Callable[[], bool], timeout: float, poll: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(poll)
    raise RuntimeError(f"timed out after {timeout:g}s waiting for {what}")


def live_executor(url: str, pid: int) -> str | None:
    rows = sql(url, "SELECT executor_id FROM helix.workers WHERE pid = %s AND state = 'live'", pid)
    return rows[0][0] if rows else None


def completed_count(url: str, prefix: str) -> int:
    """Runs of these tags that ended: `completed` in helix.runs (written by the run's final
    step) and SUCCESS in DBOS (recorded just after it)."""
    return sql(
        url,
        "SELECT count(*) FROM helix.runs r JOIN helix.messages m ON m.session_id = r.session_id "
        "AND m.seq = 1 JOIN dbos.workflow_status ws ON ws.workflow_uuid = r.workflow_id "
        "WHERE r.status = 'completed' AND ws.status = 'SUCCESS' AND m.content LIKE %s",
        prefix + "%",
    )[0][0]


def markers(workdir: Path) -> dict[str, list[tuple[str, float]]]:
    """tag -> [(executor id, wall time)] for every execution of the tool."""
    out: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for path in workdir.glob("tool-*.log"):
        for line in path.read_text().splitlines():
            tag, executor, at = line.split()
            out[tag].append((executor, float(at)))
    return out


@dataclass
class RunRow:
    run_id: str
    tag: str
    status: str
    workflow_status: str | None
    executor_id: str | None
    updated_ms: int | None
    tool_results: list[str]
    assistant_messages: int


def run_rows(url: str, prefix: str) -> list[RunRow]:
    rows = sql(
        url,
        """
        SELECT r.run_id, u.content, r.status, ws.status, ws.executor_id, ws.updated_at,
               COALESCE((SELECT array_agg(m.content ORDER BY m.seq) FROM helix.messages m
                 WHERE m.session_id = r.session_id AND m.role = 'tool'
                   AND m.tool_name = 'work'), '{}'),
               (SELECT count(*) FROM helix.messages m
                 WHERE m.session_id = r.session_id AND m.role = 'assistant')
        FROM helix.runs r
        JOIN helix.messages u ON u.session_id = r.session_id AND u.seq = 1
        LEFT JOIN dbos.workflow_status ws ON ws.workflow_uuid = r.workflow_id
        WHERE u.content LIKE %s
        """,
        prefix + "%",
    )
    return [RunRow(*row) for row in rows]


def verify_exactly_once(
    url: str,
    workdir: Path,
    prefix: str,
    expected: int,
    killed: dict[str, float],
    held: set[str] = frozenset(),  # type: ignore[assignment]
) -> dict[str, int]:
    """Every run completed once; its tool ran once, apart from executions a killed worker
    began and never checkpointed (then the run's kept result comes from a survivor).
    `killed`: executor id -> wall time of its SIGKILL; `held`: tags a victim held on
    purpose. Raises with the offending runs; returns counts for the report."""
    runs = run_rows(url, prefix)
    seen = markers(workdir)
    problems: list[str] = []
    interrupted = 0
    if len(runs) != expected:
        problems.append(f"{len(runs)} runs found, {expected} enqueued")
    tags = Counter(r.tag for r in runs)
    problems += [f"tag {t} has {n} runs" for t, n in tags.items() if n > 1]
    for run in runs:
        where = f"run {run.run_id} ({run.tag})"
        if run.status != "completed" or run.workflow_status != "SUCCESS":
            problems.append(f"{where}: helix {run.status}, dbos {run.workflow_status}")
            continue
        if len(run.tool_results) != 1:
            problems.append(f"{where}: {len(run.tool_results)} tool results in its transcript")
            continue
        if run.assistant_messages != 2:
            problems.append(f"{where}: {run.assistant_messages} assistant messages, not 2")
        kept = run.tool_results[0].split(" by ")[-1].strip('"')
        executions = seen.get(run.tag, [])
        survivors = [e for e, _ in executions if e not in killed]
        dead = [(e, at) for e, at in executions if e in killed]
        if len(executions) == 1 and executions[0][0] == kept:
            continue  # the one execution is the one the run kept
        if (
            survivors == [kept]
            and all(at < killed[e] for e, at in dead)
            and (len(dead) == 1 or run.tag in held)
        ):
            interrupted += 1  # begun on the dead worker, never checkpointed: ran again
            continue
        problems.append(f"{where}: tool executions {executions}, result kept from {kept}")
    if problems:
        head = "\n  ".join(problems[:20])
        raise AssertionError(f"{len(problems)} run(s) not completed exactly once:\n  {head}")
    return {"runs": len(runs), "interrupted_tool_reruns": interrupted}


# --- 1. recovery -----------------------------------------------------------------------


def measure_recovery(
    server: str, lease: float, kills: int, victim_runs: int, timeout: float, other_host: bool
) -> dict[str, Any]:
    rounds: list[dict[str, float]] = []
    with fleet(server, lease) as f:
        survivor = f.worker("survivor", **({"FLEET_OTHER_HOST": "1"} if other_host else {}))
        wait_for(
            "the survivor's lease",
            lambda: live_executor(f.database_url, survivor.pid) is not None,
            120,
        )
        survivor_id = live_executor(f.database_url, survivor.pid)
        for k in range(kills):
            prefix = f"k{k}-"
            victim, info = f.victim(victim_runs, prefix)
            victim_id = info["executor_id"]
            tags = {f"hold-{prefix}{i}" for i in range(victim_runs)}

            def held(tags: set[str] = tags, victim_id: str = victim_id) -> bool:
                seen = markers(f.workdir)
                return all(any(e == victim_id for e, _ in seen.get(t, [])) for t in tags)

            wait_for("the victim's runs in their tool", held, 120)
            # The heartbeat's phase at the kill decides where in [0.8, 1] lease the lease
            # lapses; a random pause makes sure it is not always the same phase.
            time.sleep(random.uniform(0, lease / 5))
            f.check_alive([survivor], ["survivor"])
            killed_at = f.sigkill(victim)
            wait_for(
                f"the runs of kill {k} to complete",
                lambda prefix=prefix: (
                    completed_count(f.database_url, f"hold-{prefix}") == victim_runs
                ),
                timeout,
                poll=0.1,
            )
            f.check_alive([survivor], ["survivor"])
            counts = verify_exactly_once(
                f.database_url,
                f.workdir,
                f"hold-{prefix}",
                victim_runs,
                {victim_id: killed_at},
                tags,
            )
            assert counts["interrupted_tool_reruns"] == victim_runs, counts
            claimed = sql(
                f.database_url,
                "SELECT state, recovered_by, recovered_runs, extract(epoch FROM recovered_at), "
                "extract(epoch FROM heartbeat_at) FROM helix.workers WHERE executor_id = %s",
                victim_id,
            )[0]
            if claimed[:3] != ("dead", survivor_id, victim_runs):
                raise AssertionError(f"kill {k}: the victim's row says {claimed[:3]}")
            seen = markers(f.workdir)
            moved = [at for t in tags for e, at in seen[t] if e == survivor_id]
            done = [r.updated_ms / 1000 for r in run_rows(f.database_url, f"hold-{prefix}")]
            rounds.append(
                {
                    "last_heartbeat": float(claimed[4]) - killed_at,
                    "claimed": float(claimed[3]) - killed_at,
                    "first_moving": min(moved) - killed_at,
                    "last_moving": max(moved) - killed_at,
                    "completed": max(done) - killed_at,
                }
            )
            print(
                f"  lease {lease:g}s, kill {k + 1}/{kills}: "
                + ", ".join(f"{key} {value:+.2f}s" for key, value in rounds[-1].items()),
                flush=True,
            )
    keys = ("claimed", "first_moving", "last_moving", "completed")
    return {
        "lease": lease,
        "survivor": "other host" if other_host else "same host",
        "kills": kills,
        "runs_per_kill": victim_runs,
        "rounds": rounds,
        **{f"{key}_median": statistics.median(r[key] for r in rounds) for key in keys},
        **{f"{key}_max": max(r[key] for r in rounds) for key in keys},
        **{f"{key}_min": min(r[key] for r in rounds) for key in keys},
    }


# --- 2. throughput ---------------------------------------------------------------------


def measure_throughput(
    server: str,
    workers: int,
    runs: int,
    *,
    lease: float,
    worker_concurrency: int | None,
    front_concurrency: int,
    kill_one: bool,
    timeout: float,
) -> dict[str, Any]:
    label = f"{workers} worker{'s' if workers > 1 else ''}" + (
        ", one killed midway" if kill_one else ""
    )
    prefix = "run-"
    with fleet(server, lease, worker_concurrency) as f:
        enqueued = f.front(runs, prefix, front_concurrency)
        queued = sql(
            f.database_url, "SELECT count(*) FROM dbos.workflow_status WHERE status = 'ENQUEUED'"
        )
        assert queued[0][0] == runs, f"{queued[0][0]} runs enqueued, expected {runs}"
        go = f.workdir / "go"
        names = [f"worker-{i}" for i in range(workers)]
        procs = [f.worker(name, FLEET_GO=str(go)) for name in names]
        wait_for(
            "the workers to import and build their HelixDBOS",
            lambda: all((f.workdir / f"built-{p.pid}").exists() for p in procs),
            180,
        )
        go.touch()
        go_at = time.time()
        killed: dict[str, float] = {}
        deadline = time.monotonic() + timeout
        done = 0
        progress_at = time.monotonic()
        while done < runs:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{label}: {done} of {runs} runs completed after {timeout:g}s")
            f.check_alive(procs, names)
            time.sleep(0.2)
            done = completed_count(f.database_url, prefix)
            if kill_one and not killed and done >= runs // 2:
                # The worker with the most runs in flight (claimed, not finished).
                victim_id, in_flight = sql(
                    f.database_url,
                    "SELECT w.executor_id, count(ws.workflow_uuid) FROM helix.workers w "
                    "LEFT JOIN dbos.workflow_status ws ON ws.executor_id = w.executor_id "
                    "AND ws.status = 'PENDING' WHERE w.state = 'live' AND w.executes_runs "
                    "GROUP BY 1 ORDER BY 2 DESC LIMIT 1",
                )[0]
                victim = next(p for p in procs if live_executor(f.database_url, p.pid) == victim_id)
                killed[victim_id] = f.sigkill(victim)
                killed_info = {"done_at_kill": done, "in_flight_on_victim": in_flight}
            if time.monotonic() - progress_at > 5:
                progress_at = time.monotonic()
                print(f"  {label}: {done}/{runs} completed", flush=True)
        f.check_alive(procs, names)
        counts = verify_exactly_once(f.database_url, f.workdir, prefix, runs, killed)
        stats = sql(
            f.database_url,
            "SELECT min(started_at_epoch_ms), max(updated_at) FROM dbos.workflow_status "
            "WHERE status = 'SUCCESS'",
        )[0]
        per_worker = sql(
            f.database_url,
            "SELECT executor_id, count(*) FROM dbos.workflow_status WHERE status = 'SUCCESS' "
            "GROUP BY executor_id ORDER BY count(*) DESC",
        )
        launched = sql(
            f.database_url,
            "SELECT min(extract(epoch FROM started_at)), max(extract(epoch FROM started_at)) "
            "FROM helix.workers WHERE executes_runs",
        )[0]
    first_start, last_end = stats[0] / 1000, stats[1] / 1000
    drain = last_end - go_at
    out: dict[str, Any] = {
        "config": label,
        "workers": workers,
        "runs": runs,
        "lease": lease,
        "worker_concurrency": worker_concurrency,
        "enqueue_seconds": enqueued["last"] - enqueued["first"],
        "enqueue_per_s": runs / (enqueued["last"] - enqueued["first"]),
        "launch_spread": float(launched[1]) - float(launched[0]),
        "first_start_after_go": first_start - go_at,
        "drain_seconds": drain,
        "runs_per_s": runs / drain,
        "runs_per_s_per_worker": runs / drain / workers,
        "runs_per_s_executing": runs / (last_end - first_start),
        "per_worker": [n for _, n in per_worker],
        **counts,
    }
    if kill_one:
        out.update(killed_info)
        out["finished_after_kill"] = last_end - next(iter(killed.values()))
    return out


# --- output ------------------------------------------------------------------------------


def print_recovery(results: list[dict[str, Any]]) -> None:
    print("\nRecovery: SIGKILL of a worker to its runs moving again on the survivor (seconds)")
    header = f"{'lease':>6} {'kills':>5}  {'claimed':>18}  {'first step':>18}  {'last step':>18}  {'all completed':>18}"
    print(header)
    for r in results:
        cells = []
        for key in ("claimed", "first_moving", "last_moving", "completed"):
            med, top = r[f"{key}_median"], r[f"{key}_max"]
            cells.append(f"{med:5.2f} / {top:5.2f} ({med / r['lease']:.2f})")
        print(
            f"{r['lease']:>5g}s {r['kills']:>5}  "
            + "  ".join(f"{c:>18}" for c in cells)
            + f"  (survivor on the {r['survivor']})"
        )
    print("  cells: median / max seconds after the kill (median in leases)")


def print_throughput(results: list[dict[str, Any]]) -> None:
    print("\nThroughput: a backlog drained by worker processes")
    print(
        f"{'configuration':<32} {'drain s':>8} {'runs/s':>7} {'/worker':>8} {'executing':>9} "
        f"{'1st start':>9}  runs per worker"
    )
    for r in results:
        print(
            f"{r['config']:<32} {r['drain_seconds']:8.1f} {r['runs_per_s']:7.1f} "
            f"{r['runs_per_s_per_worker']:8.1f} {r['runs_per_s_executing']:9.1f} "
            f"{r['first_start_after_go']:8.1f}s  {r['per_worker']}"
        )
    print(
        "  drain: from the workers' start signal to the last run's SUCCESS; executing: from "
        "the first run's dequeue to the last SUCCESS; enqueue by the front: "
        + ", ".join(f"{r['enqueue_per_s']:.0f}" for r in results)
        + " runs/s"
    )
    for r in results:
        if "done_at_kill" in r:
            print(
                f"  killed one worker with {r['in_flight_on_victim']} runs in flight after "
                f"{r['done_at_kill']} completed; all {r['runs']} completed exactly once "
                f"({r['interrupted_tool_reruns']} tool calls begun on the dead worker ran again)"
            )


def load() -> str:
    """The 1, 5 and 15 minute load averages (other processes share the 2 cores)."""
    with suppress(OSError):
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return "?"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--database-url", default=DEFAULT_URL, help=f"server (default {DEFAULT_URL})"
    )
    parser.add_argument("--runs", type=int, default=1000, help="runs per throughput configuration")
    parser.add_argument("--workers", default="1,2,4", help="worker counts (default 1,2,4)")
    parser.add_argument("--leases", default="5,10", help="leases for the recovery figures")
    parser.add_argument("--kills", type=int, default=5, help="kills per lease (default 5)")
    parser.add_argument("--victim-runs", type=int, default=4, help="runs in flight per kill")
    parser.add_argument(
        "--throughput-lease",
        type=float,
        default=15,
        help="lease in the throughput runs (15 s, the default)",
    )
    parser.add_argument(
        "--worker-concurrency",
        type=int,
        default=50,
        help="RunQueue worker_concurrency of the throughput runs; 0: the agent's own queue only",
    )
    parser.add_argument(
        "--front-concurrency", type=int, default=8, help="enqueue calls in flight (default 8)"
    )
    parser.add_argument("--timeout", type=float, default=300, help="per configuration (seconds)")
    parser.add_argument(
        "--other-host",
        action="store_true",
        help="recovery: the survivor cannot see this host's pids (as on another machine)",
    )
    parser.add_argument("--skip-recovery", action="store_true")
    parser.add_argument("--skip-throughput", action="store_true")
    args = parser.parse_args(argv)

    print(f"helix_dbos fleet benchmark on {redact_url(args.database_url)}, {os.cpu_count()} cores")
    print(f"load average before: {load()}", flush=True)
    started = time.monotonic()
    result: dict[str, Any] = {"cores": os.cpu_count(), "load_before": load()}
    if not args.skip_recovery:
        recovery = []
        for lease in (float(x) for x in args.leases.split(",")):
            recovery.append(
                measure_recovery(
                    args.database_url,
                    lease,
                    args.kills,
                    args.victim_runs,
                    args.timeout,
                    args.other_host,
                )
            )
        result["recovery"] = recovery
        print_recovery(recovery)
    if not args.skip_throughput:
        throughput = []
        configs = [(int(n), False) for n in args.workers.split(",")] + [
            (max(int(n) for n in args.workers.split(",")), True)
        ]
        for workers, kill_one in configs:
            print(f"load average: {load()}", flush=True)
            throughput.append(
                measure_throughput(
                    args.database_url,
                    workers,
                    args.runs,
                    lease=args.throughput_lease,
                    worker_concurrency=args.worker_concurrency or None,
                    front_concurrency=args.front_concurrency,
                    kill_one=kill_one,
                    timeout=args.timeout,
                )
            )
            print(
                f"  {throughput[-1]['config']}: {throughput[-1]['runs_per_s']:.1f} runs/s",
                flush=True,
            )
        result["throughput"] = throughput
        print_throughput(throughput)
    result["load_after"] = load()
    result["seconds"] = time.monotonic() - started
    print(f"\nload average after: {result['load_after']}; took {result['seconds']:.0f}s")
    print("\n" + json.dumps(rounded(result)))


if __name__ == "__main__":
    main()
