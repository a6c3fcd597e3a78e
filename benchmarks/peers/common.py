"""What every peer worker shares: the workload, the scripted model's decision, the
history filler, WAL measurement, the crash tool, and the worker's command loop.

A worker is one process per system (DBOS is a per-process singleton). The orchestrator
(`run.py`) talks to it over stdin/stdout, one JSON object a line:

    -> {"cmd": "sitting", "steps": 21, "repeats": 3, "history": [10, 1000], ...}
    <- @@ {"runs": [...], ...}

Crash mode is a separate process: `crash-start DB LOG` runs the crash workload until
it is killed; `crash-recover DB LOG [ID]` relaunches, recovers (or, for LangGraph,
resumes) and prints the outcome.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import psycopg
from pydantic import BaseModel

RESULT_PREFIX = "@@ "
APP_VERSION = "helix-bench-peers"  # one fixed DBOS application version: recovery must match
FILLER = "lorem ipsum dolor sit amet " * 8  # ~200 characters per history message

# The crash workload: CRASH_STEPS - 1 tool steps, each sleeping CRASH_SLEEP_S; the
# orchestrator kills the process once CRASH_KILL_AT tool calls have completed and the
# next one has started.
CRASH_STEPS = 7
CRASH_SLEEP_S = 0.4
CRASH_KILL_AT = 3


class Answer(BaseModel):
    """The structured output every system ends with."""

    count: int
    text: str


def final_answer(done: int) -> dict[str, Any]:
    return {"count": done, "text": "done"}


@dataclass
class Script:
    """The scripted model's state: how many steps the current run has, and when each
    model call happened (the interval between two calls is one agent step).

    The decision itself is the same for every system: with `done` tool results since
    the last user message, call `ping(i=done)` while done < steps - 1, else answer
    with the structured output. Each system's model counts `done` in its own message
    format, back from the last message to the last user one, so the harness's own work
    does not grow with the history (a forward walk of every message was counted in
    every system's step until 2026-12-07)."""

    steps: int = 21
    calls: list[float] = field(default_factory=list)

    def start(self, steps: int) -> None:
        self.steps = steps
        self.calls = []

    def called(self) -> None:
        self.calls.append(time.perf_counter())

    def wants_tool(self, done: int) -> bool:
        return done < self.steps - 1


SCRIPT = Script()


# --- the crash tool -------------------------------------------------------------------

CRASH_LOG: str | None = os.environ.get("PEERS_CRASH_LOG") or None


def _mark(line: str) -> None:
    assert CRASH_LOG is not None
    with open(CRASH_LOG, "a") as f:
        f.write(f"{line} {os.getpid()}\n")
        f.flush()
        os.fsync(f.fileno())


async def tool_body_async(i: int) -> str:
    """The tool's work: nothing while timing; in crash mode, log, sleep, log."""
    if CRASH_LOG is not None:
        _mark(f"start {i}")
        await asyncio.sleep(CRASH_SLEEP_S)
        _mark(f"end {i}")
    return "pong"


def tool_body_sync(i: int) -> str:
    if CRASH_LOG is not None:
        _mark(f"start {i}")
        time.sleep(CRASH_SLEEP_S)
        _mark(f"end {i}")
    return "pong"


# --- history filler -------------------------------------------------------------------


def history_turns(count: int) -> list[tuple[str, Any]]:
    """`count` messages as (kind, payload) in turns of user / assistant tool call /
    tool result / assistant text (then a user / assistant pair for a remainder of 2).
    kind is "user", "call" (payload: call id), "result" (payload: call id) or "text".
    Each system turns these into its own message types."""
    if count % 2:
        raise ValueError("history length must be even")
    out: list[tuple[str, Any]] = []
    turn = 0
    while len(out) < count:
        turn += 1
        out.append(("user", f"question {turn}: {FILLER}"))
        if count - len(out) >= 3:
            out.append(("call", f"h{turn}"))
            out.append(("result", f"h{turn}"))
        out.append(("text", f"answer {turn}: {FILLER}"))
    return out


def history_result_payload() -> str:
    return json.dumps({"pong": FILLER})


# --- database ------------------------------------------------------------------------


class Wal:
    """WAL written for one database, read back with pg_walinspect (PostgreSQL 15+): the
    records that touch a block of this database, and the commit records of their
    transactions. Other databases on the server (and their checkpoints) are left out;
    full-page images are counted separately, since how many there are depends on when
    the server last checkpointed. Without pg_walinspect (or when the segments were
    recycled already), the cluster-wide LSN difference is reported instead."""

    def __init__(self, database_url: str) -> None:
        self.conn = psycopg.connect(database_url, autocommit=True)
        row = self.conn.execute(
            "SELECT oid FROM pg_database WHERE datname = current_database()"
        ).fetchone()
        assert row is not None
        self.pattern = f"rel [0-9]+/{row[0]}/"
        try:
            self.conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
            self.inspect = True
        except psycopg.Error:
            self.inspect = False

    def lsn(self) -> str:
        row = self.conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
        assert row is not None
        return str(row[0])

    def measure(self, before: str, after: str) -> dict[str, Any]:
        """{"bytes", "fpi", "cluster", "isolated"} between two LSNs."""
        row = self.conn.execute(
            "SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)", (after, before)
        ).fetchone()
        assert row is not None
        cluster = int(row[0])
        out: dict[str, Any] = {"bytes": cluster, "fpi": 0, "cluster": cluster, "isolated": False}
        if self.inspect:
            try:
                row = self.conn.execute(
                    "WITH r AS (SELECT xid, record_length, fpi_length, block_ref "
                    "FROM pg_get_wal_records_info(%(a)s::pg_lsn, %(b)s::pg_lsn)), "
                    "mine AS (SELECT DISTINCT xid FROM r WHERE block_ref ~ %(p)s "
                    "AND xid <> '0'::xid) "
                    "SELECT coalesce(sum(record_length), 0), coalesce(sum(fpi_length), 0) FROM r "
                    "WHERE block_ref ~ %(p)s OR (xid <> '0'::xid AND xid IN (SELECT xid FROM mine))",
                    {"a": before, "b": after, "p": self.pattern},
                ).fetchone()
                assert row is not None
                out.update(bytes=int(row[0]), fpi=int(row[1]), isolated=True)
            except psycopg.Error:
                pass  # recycled already: keep the cluster-wide figure
        return out

    def close(self) -> None:
        self.conn.close()


# --- a system, as the worker loop sees it --------------------------------------------


class System(Protocol):
    name: str

    async def setup(self, database_url: str) -> None: ...

    async def prepare(self, history: int) -> Any:
        """Whatever a run on `history` messages needs, built outside the timing
        (a session, a thread, a message list). history 0: a fresh conversation."""
        ...

    async def run(self, steps: int, prepared: Any) -> dict[str, Any]:
        """One run of `steps` model calls; returns its structured output (as a dict)."""
        ...

    async def shutdown(self) -> None: ...

    async def crash_start(self, database_url: str) -> str:
        """Start the crash workload and return an id to recover it by (it never ends:
        the orchestrator kills the process)."""
        ...

    async def crash_recover(self, database_url: str, run_id: str) -> dict[str, Any]:
        """Relaunch after the kill; return {"status": ..., "output": ..., "note": ...}."""
        ...


@dataclass
class RunTiming:
    steps: int
    history: int
    total_s: float
    first_call_s: float
    intervals_s: list[float]
    wal_bytes: int  # this database's WAL records (incl. full-page images)
    wal_fpi: int  # of which full-page images
    wal_isolated: bool  # False: cluster-wide LSN difference (pg_walinspect unavailable)
    inside_s: float | None = None  # bare DBOS only: the steps' time inside the workflow


async def timed_run(system: System, wal: Wal, steps: int, history: int) -> RunTiming:
    prepared = await system.prepare(history)
    SCRIPT.start(steps)
    before = wal.lsn()
    started = time.perf_counter()
    output = await system.run(steps, prepared)
    total = time.perf_counter() - started
    after = wal.lsn()
    written = wal.measure(before, after)
    calls = SCRIPT.calls
    if system.name != "bare":
        expected = final_answer(steps - 1)
        if output != expected or len(calls) != steps:
            raise RuntimeError(
                f"{system.name}: run did not go as scripted: output {output!r}, "
                f"{len(calls)} model calls for {steps} steps"
            )
    return RunTiming(
        steps=steps,
        history=history,
        total_s=total,
        first_call_s=(calls[0] - started) if calls else 0.0,
        intervals_s=[b - a for a, b in zip(calls[:-1], calls[1:], strict=True)],
        wal_bytes=written["bytes"],
        wal_fpi=written["fpi"],
        wal_isolated=written["isolated"],
        inside_s=output.get("inside_s") if system.name == "bare" else None,
    )


async def sitting(system: System, wal: Wal, cmd: dict[str, Any]) -> dict[str, Any]:
    """One sitting: `repeats` x (a long run and two 1-step runs, fresh conversations),
    then `repeats` x each history size, alternating the order."""
    steps, repeats = int(cmd["steps"]), int(cmd["repeats"])
    runs: list[RunTiming] = []
    for rep in range(repeats):  # two 1-step runs per long one: the intercept hangs on them
        order = [steps, 1, 1] if rep % 2 == 0 else [1, steps, 1]
        for n in order:
            runs.append(await timed_run(system, wal, n, 0))
    sizes = [int(h) for h in cmd.get("history", [])]
    for rep in range(int(cmd.get("history_repeats", repeats))):
        for size in sizes if rep % 2 == 0 else list(reversed(sizes)):
            runs.append(await timed_run(system, wal, steps, size))
    return {"runs": [r.__dict__ for r in runs]}


def emit(obj: Any) -> None:
    sys.stdout.write(RESULT_PREFIX + json.dumps(obj) + "\n")
    sys.stdout.flush()


async def _readline() -> str:
    return await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)


async def serve(system: System, database_url: str) -> None:
    await system.setup(database_url)
    wal = Wal(database_url)
    try:
        # Warm up (imports, first connections, caches) before the first timed sitting.
        for history in (0, 10):
            await timed_run(system, wal, 3, history)
        emit({"ready": system.name, "pid": os.getpid()})
        while True:
            line = await _readline()
            if not line:
                break
            cmd = json.loads(line)
            if cmd["cmd"] == "quit":
                break
            try:
                emit(await sitting(system, wal, cmd))
            except Exception as exc:
                emit({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        wal.close()
        await system.shutdown()


def worker_main(make: Callable[[], System], argv: list[str] | None = None) -> None:
    """usage: python -m benchmarks.peers.<worker> serve|crash-start|crash-recover DB [ID]"""
    args = list(sys.argv[1:] if argv is None else argv)
    mode, database_url = args[0], args[1]
    system = make()

    async def main() -> None:
        if mode == "serve":
            await serve(system, database_url)
        elif mode == "crash-start":
            SCRIPT.start(CRASH_STEPS)
            run_id = await system.crash_start(database_url)
            emit({"started": run_id})
            await asyncio.sleep(3600)  # killed by the orchestrator
        elif mode == "crash-recover":
            SCRIPT.start(CRASH_STEPS)
            emit(await system.crash_recover(database_url, args[2]))
            await system.shutdown()
        else:
            raise SystemExit(f"unknown mode {mode!r}")

    asyncio.run(main())
