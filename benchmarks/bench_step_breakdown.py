"""Where an agent step's statements, rows, commits and Python CPU go, at 10 and at 1,000
messages of history.

Counts are exact whatever the machine's load, so they come first. For each history size
the benchmark runs one short and one long agent run (--short / --long steps, each on a
fresh session holding that history) and reads, around each run, PostgreSQL's own
counters: `pg_stat_statements` (calls, rows, execution time per normalised statement,
nested statements of functions and triggers included), `pg_stat_user_tables` (rows
inserted / updated / deleted per table), `pg_stat_database` (commits) and the WAL
position. Per step = (long run - short run) / (long - short) steps; what is left of the
short run is the fixed part of a run (open, first full transcript read, end). Statements
the process sends while idle (heartbeats, DBOS's pollers) are measured in an idle window
of the same length and shown apart, not charged to the step.

The PostgreSQL cluster is the benchmark's own (the system's PostgreSQL 15 binaries, with
`pg_stat_statements` preloaded), started in a temporary folder and removed at the end:
never the shared server's configuration.

usage: .venv/bin/python benchmarks/bench_step_breakdown.py [--short 5] [--long 205]
       [--py-spy PREFIX]   also sample Python CPU (py-spy --gil --idle) of one long run
                           per history size into PREFIX-<history>.txt and summarise it
       [--state-bytes N]   each session's state: about N bytes of JSON (default 0: `{}`),
                           kept by the steps (the session's row holds it)
       [--state-writes]    the tool changes the state at every step (one key)
       [--no-autovacuum]   no autovacuum in the benchmark's cluster: WAL per step without
                           a vacuum's WAL in some windows and not in others
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from bench_agent_loop import (
    LARGE_HISTORY,
    SMALL_HISTORY,
    Bench,
    RunTiming,
    fresh_database,
    launch_bench,
    session_state,
)
from bench_common import rounded

PG_BIN = Path("/usr/lib/postgresql/15/bin")
PG_USER = "postgres"  # the cluster's files belong to it when the benchmark runs as root
STATS_FLUSH_S = 11.5  # PostgreSQL 15 backends flush table/database counters within 10 s idle
IDLE_WINDOW_S = 30.0
UTILITY = {"BEGIN", "BEGIN ISOLATION LEVEL READ COMMITTED", "COMMIT", "ROLLBACK"}


# --- a cluster of the benchmark's own ------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_cluster_user(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    return ["su", PG_USER, "-s", "/bin/sh", "-c", " ".join(f"'{a}'" for a in argv)]


@contextlib.contextmanager
def own_cluster(autovacuum: bool = True) -> Iterator[str]:
    """A fresh PostgreSQL 15 cluster with pg_stat_statements (track = all); yields the
    URL of its `postgres` database. Without `autovacuum`, no vacuum's WAL lands in a
    run's window (the seeded history sets it off at a time of its own)."""
    folder = Path(tempfile.mkdtemp(prefix="helix-step-breakdown-"))
    data, log = folder / "data", folder / "server.log"
    port = _free_port()
    if os.geteuid() == 0:
        entry = pwd.getpwnam(PG_USER)
        os.chown(folder, entry.pw_uid, entry.pw_gid)
    run = [str(PG_BIN / "initdb"), "-D", str(data), "--auth=trust", "-U", "postgres"]
    subprocess.run(_as_cluster_user(run), check=True, capture_output=True, timeout=120)
    with (data / "postgresql.conf").open("a") as conf:
        conf.write(
            f"\nlisten_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = ''\n"
            "max_connections = 100\nshared_preload_libraries = 'pg_stat_statements'\n"
            "pg_stat_statements.track = all\npg_stat_statements.track_utility = on\n"
            "pg_stat_statements.max = 10000\n"
        )
        if not autovacuum:
            conf.write("autovacuum = off\n")
    ctl = [str(PG_BIN / "pg_ctl"), "-D", str(data), "-l", str(log), "-w"]
    subprocess.run(_as_cluster_user([*ctl, "start"]), check=True, capture_output=True, timeout=120)
    url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        yield url
    finally:
        subprocess.run(
            _as_cluster_user([*ctl, "-m", "immediate", "stop"]), capture_output=True, timeout=120
        )
        shutil.rmtree(folder, ignore_errors=True)


# --- counters ------------------------------------------------------------------------


@dataclass
class Statement:
    text: str
    toplevel: bool
    calls: float = 0.0
    rows: float = 0.0
    exec_ms: float = 0.0


@dataclass
class Counters:
    """PostgreSQL's counters for one database at one moment (or a difference of two)."""

    statements: dict[tuple[int, bool], Statement] = field(default_factory=dict)
    tables: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # ins, upd, del
    commits: float = 0.0
    rollbacks: float = 0.0
    wal_bytes: float = 0.0

    def minus(self, other: Counters, scale: float = 1.0) -> Counters:
        """(self - other) / scale."""
        out = Counters(
            commits=(self.commits - other.commits) / scale,
            rollbacks=(self.rollbacks - other.rollbacks) / scale,
            wal_bytes=(self.wal_bytes - other.wal_bytes) / scale,
        )
        for key, st in self.statements.items():
            old = other.statements.get(key, Statement(st.text, st.toplevel))
            diff = Statement(
                st.text,
                st.toplevel,
                (st.calls - old.calls) / scale,
                (st.rows - old.rows) / scale,
                (st.exec_ms - old.exec_ms) / scale,
            )
            if diff.calls:
                out.statements[key] = diff
        for name, (i, u, d) in self.tables.items():
            oi, ou, od = other.tables.get(name, (0.0, 0.0, 0.0))
            row = ((i - oi) / scale, (u - ou) / scale, (d - od) / scale)
            if any(row):
                out.tables[name] = row
        return out


def read_counters(conn: psycopg.Connection[Any]) -> Counters:
    out = Counters()
    for queryid, toplevel, text, calls, rows, ms in conn.execute(
        "SELECT queryid, toplevel, query, calls, rows, total_exec_time "
        "FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database "
        "WHERE datname = current_database())"
    ):
        out.statements[(int(queryid), bool(toplevel))] = Statement(
            " ".join(str(text).split()), bool(toplevel), calls, rows, ms
        )
    for schema, table, ins, upd, dele in conn.execute(
        "SELECT schemaname, relname, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables"
    ):
        out.tables[f"{schema}.{table}"] = (ins, upd, dele)
    commits, rollbacks = conn.execute(
        "SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = current_database()"
    ).fetchone() or (0, 0)
    out.commits, out.rollbacks = float(commits), float(rollbacks)
    lsn = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
    out.wal_bytes = float(lsn[0]) if lsn else 0.0
    return out


def is_monitoring(text: str) -> bool:
    """The benchmark's own reads of the counters."""
    return any(
        s in text
        for s in ("pg_stat_statements", "pg_stat_user_tables", "pg_stat_database", "pg_current_wal")
    )


# --- measurements --------------------------------------------------------------------


@dataclass
class RunCounters:
    counters: Counters
    timing: RunTiming
    wall_s: float
    window_s: float  # between the two reads of the counters


async def counted_run(bench: Bench, steps: int, history: int) -> RunCounters:
    """One agent run of `steps` steps on a fresh session holding `history` messages,
    with the counters read (after their flush) before and after it."""
    session_id = bench.session_with_history(history)
    await asyncio.sleep(STATS_FLUSH_S)
    before = read_counters(bench.sql)
    started = time.perf_counter()
    timing = await bench.agent_run(steps, session_id)
    wall = time.perf_counter() - started
    await asyncio.sleep(STATS_FLUSH_S)
    window = time.perf_counter() - started
    return RunCounters(read_counters(bench.sql).minus(before), timing, wall, window)


async def idle_window(bench: Bench, seconds: float) -> Counters:
    """What the process sends while no run is under way, over `seconds`."""
    await asyncio.sleep(STATS_FLUSH_S)
    before = read_counters(bench.sql)
    await asyncio.sleep(seconds)
    return read_counters(bench.sql).minus(before)


@contextlib.contextmanager
def py_spy(path: str) -> Iterator[None]:
    """Sample this process's GIL holder (py-spy record --gil --idle, raw collapsed stacks)."""
    exe = Path(sys.executable).parent / "py-spy"
    argv = [str(exe), "record", "--gil", "--idle", "--format", "raw", "-r", "250"]
    proc = subprocess.Popen(
        [*argv, "-p", str(os.getpid()), "-o", path],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.5)  # attached
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)


def _package(frame: str) -> str:
    """`func (path/to/file.py` -> its top package (helix_dbos, dbos, sqlalchemy, ...)."""
    path = frame.rpartition("(")[2]  # py-spy names files from their import root
    if "site-packages/" in path:
        path = path.split("site-packages/", 1)[1]
    return path.split("/", 1)[0] if "/" in path else "stdlib " + Path(path).stem


def summarise_py_spy(path: str, top: int = 15) -> dict[str, list[tuple[str, float]]]:
    """Share of samples by leaf frame (self time) and by frame anywhere on the stack
    (inclusive), frames named `function (file)`."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    packages: Counter[str] = Counter()
    total = 0
    for line in Path(path).read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = [f.rsplit(":", 1)[0] for f in stack.split(";")[1:]]  # drop the thread
        frames = [f.replace(str(Path(sys.prefix)), "<venv>") for f in frames]
        if frames:
            own[frames[-1]] += count
            packages[_package(frames[-1])] += count
        for frame in set(frames):
            inclusive[frame] += count
    if not total:
        return {"own": [], "inclusive": [], "packages": [], "samples": [("", 0.0)]}
    return {
        "samples": [("", float(total))],
        "packages": [(p, n / total) for p, n in packages.most_common()],
        "own": [(f, n / total) for f, n in own.most_common(top)],
        "inclusive": [(f, n / total) for f, n in inclusive.most_common(top * 3)],
    }


# --- report --------------------------------------------------------------------------


def owner(text: str) -> str:
    """Whose statement: DBOS's system tables or helix's own."""
    low = text.lower()
    if "helix." in low:  # helix's statements may read dbos tables too; DBOS's never helix's
        return "helix"
    if "dbos." in low:
        return "dbos"
    return "other"  # BEGIN / COMMIT / SET ...: see the transaction count


def _top(counters: Counters) -> list[Statement]:
    return [st for st in counters.statements.values() if st.toplevel and not is_monitoring(st.text)]


def _table_rows(counters: Counters, skip: set[str]) -> list[tuple[str, float, float, float]]:
    return [
        (name, i, u, d)
        for name, (i, u, d) in sorted(counters.tables.items())
        if name not in skip and max(abs(i), abs(u), abs(d)) >= 0.05
    ]


def print_breakdown(
    history: int, per_step: Counters, fixed: Counters, background: set[str]
) -> None:
    print(f"\n=== {history} messages of history: per agent step ===")
    tops = _top(per_step)
    total_ms = sum(st.exec_ms for st in tops) or 1.0
    print(
        f"top-level statements (each a round trip, BEGIN/COMMIT included): "
        f"{sum(st.calls for st in tops):.2f}; "
        + ", ".join(
            f"{who} {sum(st.calls for st in tops if owner(st.text) == who):.2f}"
            for who in ("dbos", "helix", "other")
        )
    )
    print(
        f"commits {per_step.commits:.2f}, rollbacks {per_step.rollbacks:.2f}, "
        f"WAL {per_step.wal_bytes:.0f} bytes, server execution {total_ms:.3f} ms"
    )
    print(f"{'calls':>6} {'rows/call':>9} {'ms':>7} {'time%':>6}  statement")
    for st in sorted(tops, key=lambda s: (-s.exec_ms, -s.calls)):
        if abs(st.calls) < 0.05:
            continue
        per_call = st.rows / st.calls
        print(
            f"{st.calls:6.2f} {per_call:9.2f} {st.exec_ms:7.3f} {100 * st.exec_ms / total_ms:6.1f}  "
            f"[{owner(st.text)}] {st.text[:130]}"
        )
    nested = [st for st in per_step.statements.values() if not st.toplevel and st.calls >= 0.05]
    if nested:
        print("nested in functions and triggers (their time is inside their statement's):")
        for st in sorted(nested, key=lambda s: -s.exec_ms):
            per_call = st.rows / st.calls
            print(f"{st.calls:6.2f} {per_call:9.2f} {st.exec_ms:7.3f}         {st.text[:130]}")
    print("rows per table (inserted / updated / deleted):")
    rows = _table_rows(per_step, set())
    for name, i, u, d in rows:
        print(f"  {name:<32} {i:6.2f} {u:6.2f} {d:6.2f}")
    ins = sum(r[1] for r in rows)
    upd = sum(r[2] for r in rows)
    dele = sum(r[3] for r in rows)
    print(f"  {'total':<32} {ins:6.2f} {upd:6.2f} {dele:6.2f}  = {ins + upd + dele:.2f}")
    print(f"--- fixed part of one run at {history} messages ---")
    ftops = [st for st in _top(fixed) if abs(st.calls) >= 0.5]
    print(
        f"statements other than BEGIN/COMMIT and the idle process's: {sum(st.calls for st in ftops):.1f}"
    )
    for st in sorted(ftops, key=lambda s: -s.exec_ms):
        print(f"{st.calls:6.1f} {st.exec_ms:7.3f}ms  [{owner(st.text)}] {st.text[:130]}")
    frows = _table_rows(fixed, background)
    print(
        f"rows {sum(i + u + d for _, i, u, d in frows):.1f}: "
        + ", ".join(f"{n} {i:.0f}/{u:.0f}/{d:.0f}" for n, i, u, d in frows if max(i, u, d) >= 0.5)
    )


def statements_json(counters: Counters) -> list[dict[str, Any]]:
    return [
        {"calls": st.calls, "rows": st.rows, "ms": st.exec_ms, "top": st.toplevel, "text": st.text}
        for st in sorted(counters.statements.values(), key=lambda s: -s.exec_ms)
        if abs(st.calls) >= 0.05 and not is_monitoring(st.text)
    ]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {
        "uptime": subprocess.run(
            ["uptime"], capture_output=True, text=True, check=False
        ).stdout.strip()
    }
    with own_cluster(not args.no_autovacuum) as server, fresh_database(server) as database_url:
        bench = launch_bench(database_url, state_writes=args.state_writes)
        bench.state = session_state(args.state_bytes)
        helix = bench.helix
        bench.sql.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")  # its views
        try:
            for size in (SMALL_HISTORY, LARGE_HISTORY):  # warm-up: pools, plans, caches
                warm = bench.session_with_history(size)
                await bench.agent_run(args.short, warm)
            state_row = bench.sql.execute(
                "SELECT pg_column_size(state), pg_column_size(s.*), state ? 'ticks' "
                "FROM helix.sessions s WHERE session_id = %s",
                (warm,),
            ).fetchone()
            assert state_row is not None
            result["state"] = {
                "state_bytes": state_row[0],
                "session_row_bytes": state_row[1],
                "written_by_steps": state_row[2],
            }
            print(
                f"session state: {state_row[0]} bytes stored, the session's row "
                f"{state_row[1]} bytes; changed by the steps: {state_row[2]}"
            )
            idle = await idle_window(bench, IDLE_WINDOW_S)
            background = {name for name, row in idle.tables.items() if any(row)}
            print(f"idle process, {IDLE_WINDOW_S:.0f} s (background, not charged to steps):")
            for st in _top(idle):
                print(f"  {st.calls:5.0f}  [{owner(st.text)}] {st.text[:130]}")
            print(f"  commits {idle.commits:.0f}; tables written: {sorted(background)}")
            dump: dict[str, Any] = {}
            span = args.long - args.short
            for size in (SMALL_HISTORY, LARGE_HISTORY):
                short = await counted_run(bench, args.short, size)
                long = await counted_run(bench, args.long, size)
                per_step = long.counters.minus(short.counters, span)
                steps_part = per_step.minus(Counters(), 1 / args.short)  # per_step * short
                fixed = short.counters.minus(steps_part)
                # The idle process's statements tick once a second: not the run's, and
                # BEGIN/COMMIT cannot be told apart from the run's, so both are left out.
                fixed.statements = {
                    k: st
                    for k, st in fixed.statements.items()
                    if k not in idle.statements and st.text not in UTILITY
                }
                print_breakdown(size, per_step, fixed, background)
                dump[str(size)] = {
                    "per_step": statements_json(per_step),
                    "fixed": statements_json(fixed),
                }
                helix_step = [
                    st for st in _top(per_step) if owner(st.text) == "helix" and st.calls >= 0.5
                ]
                result[str(size)] = {
                    "statements_per_step": sum(st.calls for st in _top(per_step)),
                    "server_ms_per_step": sum(st.exec_ms for st in _top(per_step)),
                    "helix_server_ms_per_step": sum(st.exec_ms for st in helix_step),
                    "rows_per_step": sum(sum(v) for v in per_step.tables.values()),
                    "fixed_rows": sum(r[1] + r[2] + r[3] for r in _table_rows(fixed, background)),
                    "commits_per_step": per_step.commits,
                    "wal_bytes_per_step": per_step.wal_bytes,
                    "steady_step_ms": long.timing.steady_ms,
                    "run_per_step_ms": long.timing.per_step_ms,
                }
            if args.statements:
                Path(args.statements).write_text(json.dumps(rounded(dump), indent=1))
            small, large = result[str(SMALL_HISTORY)], result[str(LARGE_HISTORY)]
            result["steady_ratio_1000_10"] = large["steady_step_ms"] / small["steady_step_ms"]
            if args.py_spy:
                for size in (SMALL_HISTORY, LARGE_HISTORY):
                    path = f"{args.py_spy}-{size}.txt"
                    sessions = [bench.session_with_history(size) for _ in range(args.py_spy_runs)]
                    with py_spy(path):
                        for session in sessions:
                            await bench.agent_run(args.long, session)
                    summary = summarise_py_spy(path)
                    print(
                        f"\n=== py-spy --gil --idle, {args.py_spy_runs} runs of {args.long} steps "
                        f"at {size} msgs ({summary['samples'][0][1]:.0f} samples) ==="
                    )
                    print("self time by package:")
                    for package, share in summary["packages"]:
                        print(f"  {100 * share:5.1f}%  {package}")
                    print("self (leaf frames):")
                    for frame, share in summary["own"]:
                        print(f"  {100 * share:5.1f}%  {frame}")
                    print("inclusive:")
                    for frame, share in summary["inclusive"]:
                        print(f"  {100 * share:5.1f}%  {frame}")
        finally:
            bench.close()
            helix.shutdown()
    print("\n" + json.dumps(rounded(result)))
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--short", type=int, default=5, help="steps of the short run (default 5)")
    parser.add_argument("--long", type=int, default=205, help="steps of the long run (default 205)")
    parser.add_argument("--py-spy", metavar="PREFIX", help="also sample Python CPU with py-spy")
    parser.add_argument("--py-spy-runs", type=int, default=4, help="long runs sampled per size")
    parser.add_argument("--statements", metavar="PATH", help="write every statement's full text")
    parser.add_argument(
        "--state-bytes", type=int, default=0, help="each session's state, in bytes of JSON"
    )
    parser.add_argument(
        "--state-writes", action="store_true", help="the tool changes the state at every step"
    )
    parser.add_argument(
        "--no-autovacuum",
        action="store_true",
        help="the cluster runs no autovacuum (its WAL otherwise falls in some runs' windows)",
    )
    args = parser.parse_args(argv)
    if not 3 <= args.short < args.long:
        parser.error("need 3 <= --short < --long")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
