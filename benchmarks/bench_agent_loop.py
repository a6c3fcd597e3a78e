"""How much an agent step costs on top of DBOS, and whether it grows with history.

One process, one fresh database, three measurements:

1. Agent step over bare DBOS step: a DBOS workflow running N trivial async steps
   against an agent whose (mock) model calls one instant tool N-1 times, then answers.
2. History length: steady-state agent step time on a session that already holds
   1,000 messages over one that holds 10 (runs alternated, fresh sessions each time),
   plus the first step, which reads the whole transcript once.
3. Where one agent step's time goes: wall-clock timers wrapped around the step bodies,
   DBOS's step/transaction calls and its system-database bookkeeping (optionally a
   pyinstrument profile as well).

usage: .venv/bin/python benchmarks/bench_agent_loop.py [--steps N] [--database-url URL]

The database server is --database-url, else $HELIX_BENCH_DATABASE_URL, else the
embedded PostgreSQL in .helix/bench-pgdata; a fresh database is created on it and
dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import random
import statistics
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dbos._dbos as dbos_module
import psycopg
from bench_common import rounded
from dbos import DBOS
from dbos._dbos import _get_dbos_instance

import helix_dbos
from helix_dbos import Agent, HelixDBOS, HistoryPolicy, MockLLM, ToolContext, tool
from helix_dbos.orchestration.types import LLMRequest
from helix_dbos.runtime.loop import agent_loop, tool_batch
from helix_dbos.runtime.loop import llm_step as llm_step_module
from helix_dbos.runtime.process.event_loop import on_target_loop
from helix_dbos.runtime.starts import run_starts
from helix_dbos.runtime.steps import commit as step_commit
from helix_dbos.store import repository
from helix_dbos.store.database import (
    libpq_url,
    redact_url,
    resolve_database_url,
    with_database,
)

REPO = Path(__file__).resolve().parent.parent
EMBEDDED_DIR = REPO / ".helix" / "bench-pgdata"
AGENT_NAME = "bench_agent"
RATIO_TARGET = 3.0
HISTORY_RATIO_TARGET = 1.3
SMALL_HISTORY, LARGE_HISTORY = 10, 1000
FILLER = "lorem ipsum dolor sit amet " * 8  # ~200 characters per history message


# --- the bare DBOS baseline (registered at import, before DBOS.launch) ---------


@DBOS.step(name="bench.trivial")
async def trivial_step(i: int) -> int:
    return i + 1


@DBOS.workflow(name="bench.bare_steps")
async def bare_steps_workflow(n: int) -> float:
    """Runs n trivial steps; returns the seconds they took (workflow start excluded)."""
    started = time.perf_counter()
    for i in range(n):
        await trivial_step(i)
    return time.perf_counter() - started


# --- the agent ------------------------------------------------------------------


@tool
async def ping() -> str:
    """Answers at once."""
    return "pong"


@tool
async def tick(ctx: ToolContext) -> str:
    """Answers at once, and changes the session's state (one key)."""
    ctx.update_state({"ticks": ctx.state_dict.get("ticks", 0) + 1})
    return "tock"


def session_state(size: int) -> dict[str, Any]:
    """A session state of about `size` bytes of JSON: notes of varied text (pseudo-random
    words, so not the run of one character that would compress to nothing), the shape of
    what an agent keeps (facts, a plan, a few counters)."""
    if size <= 0:
        return {}
    words = [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "user",
        "order",
        "refund",
        "invoice",
        "shipped",
        "pending",
        "note",
        "plan",
    ]
    rng = random.Random(size)
    state: dict[str, Any] = {"customer": {"id": "cus_0042", "tier": "gold"}, "notes": []}
    while len(json.dumps(state)) < size:
        note = " ".join(rng.choice(words) for _ in range(6)) + f" #{rng.randrange(10**6)}"
        state["notes"].append(note)
    return state


class Script:
    """The model: a tool call per step until the run's step budget, then a text reply.

    Records when each model call happens, so the interval between consecutive calls
    is exactly one agent step (LLM step, tool step, commit, next LLM step's read).
    """

    def __init__(self, tool_name: str = "ping") -> None:
        self.steps = 1
        self.tool_name = tool_name
        self.calls: list[float] = []

    def start(self, steps: int) -> None:
        self.steps = steps
        self.calls = []

    def __call__(self, request: LLMRequest) -> dict[str, Any]:
        self.calls.append(time.perf_counter())
        last_user = max(i for i, m in enumerate(request.messages) if m.role == "user")
        done = sum(1 for m in request.messages[last_user:] if m.role == "assistant")
        if done < self.steps - 1:
            call = {"id": f"t{done}", "name": self.tool_name, "arguments": {}}
            return {"type": "tool_calls", "tool_calls": [call]}
        return {"type": "text", "content": "done"}


@dataclass
class RunTiming:
    steps: int
    workflow_s: float  # execute() called -> DBOS recorded the workflow's SUCCESS
    caller_s: float  # execute() called -> `await handle.result()` returned
    first_call_s: float  # execute() called -> first model call
    intervals_s: list[float]  # between consecutive model calls: one agent step each

    @property
    def per_step_ms(self) -> float:
        return self.workflow_s / self.steps * 1000

    @property
    def caller_per_step_ms(self) -> float:
        return self.caller_s / self.steps * 1000

    @property
    def steady_ms(self) -> float:
        return statistics.median(self.intervals_s) * 1000


class Bench:
    def __init__(
        self,
        helix: HelixDBOS,
        agent: Agent,
        mock: MockLLM,
        script: Script,
        database_url: str,
    ) -> None:
        self.helix = helix
        self.agent = agent
        self.mock = mock
        self.script = script
        self.database_url = database_url
        self.state: dict[str, Any] = {}  # of each session the benchmark creates
        self.sql = psycopg.connect(
            libpq_url(database_url), autocommit=True, prepare_threshold=None
        )  # seeding only; no prepared statement, so it works through a pooler too

    def close(self) -> None:
        self.sql.close()

    async def bare(self, steps: int) -> float:
        """Per-step ms of a bare DBOS workflow (timed inside the workflow)."""

        async def run() -> float:
            handle = await DBOS.start_workflow_async(bare_steps_workflow, steps)
            return await handle.get_result()

        return await on_target_loop(run) / steps * 1000

    async def agent_run(self, steps: int, session_id: str | None = None) -> RunTiming:
        self.mock.reset()  # it records every request; keep memory flat
        self.script.start(steps)
        wall_start = time.time()
        started = time.perf_counter()
        handle = await self.helix.execute(self.agent, "go", session_id=session_id)
        result = await handle.result()
        caller = time.perf_counter() - started
        if result.status != "completed" or result.step_count != steps:
            raise RuntimeError(f"benchmark run did not complete as scripted: {result}")
        # When the workflow really ended: handle.result() only notices it at its next poll.
        row = self.sql.execute(
            "SELECT updated_at FROM dbos.workflow_status WHERE workflow_uuid = %s",
            (handle.workflow_id,),
        ).fetchone()
        assert row is not None
        calls = self.script.calls
        return RunTiming(
            steps=steps,
            workflow_s=row[0] / 1000 - wall_start,
            caller_s=caller,
            first_call_s=calls[0] - started,
            intervals_s=[b - a for a, b in zip(calls[:-1], calls[1:], strict=True)],
        )

    def session_with_history(self, count: int) -> str:
        return create_session_with_history(self.sql, count, self.state)


# --- database -------------------------------------------------------------------


def server_url(explicit: str | None) -> tuple[str, str]:
    """(server URL, "server" | "embedded")."""
    url = explicit or os.environ.get("HELIX_BENCH_DATABASE_URL")
    if url:
        return url, "server"
    return resolve_database_url(None, data_dir=EMBEDDED_DIR), "embedded"


@contextmanager
def fresh_database(server: str) -> Iterator[str]:
    name = f"helix_bench_{uuid.uuid4().hex[:10]}"
    admin = libpq_url(with_database(server, "postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield with_database(server, name)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')


def history_rows(count: int) -> list[tuple[Any, ...]]:
    """(role, content, tool_calls, tool_call_id, tool_name) rows with valid tool pairing:
    turns of user / assistant tool call / tool result / assistant text, then a
    user / assistant text pair for a remainder of 2."""
    if count % 2:
        raise ValueError("history length must be even")
    rows: list[tuple[Any, ...]] = []
    turn = 0
    while len(rows) < count:
        turn += 1
        rows.append(("user", f"question {turn}: {FILLER}", None, None, None))
        if count - len(rows) >= 3:
            call = json.dumps([{"id": f"h{turn}", "name": "ping", "arguments": {}}])
            rows.append(("assistant", None, call, None, None))
            rows.append(("tool", json.dumps({"pong": FILLER}), None, f"h{turn}", "ping"))
        rows.append(("assistant", f"answer {turn}: {FILLER}", None, None, None))
    return rows


def create_session_with_history(
    conn: psycopg.Connection[Any], count: int, state: dict[str, Any] | None = None
) -> str:
    """A completed session whose transcript already holds `count` messages (and whose
    state is `state`)."""
    session_id = f"ses_bench_{uuid.uuid4().hex}"
    rows = history_rows(count)
    with conn.transaction():
        conn.execute(
            "INSERT INTO helix.sessions (session_id, agent_name, status, state) "
            "VALUES (%s, %s, 'completed', %s::jsonb)",
            (session_id, AGENT_NAME, json.dumps(state or {})),
        )
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO helix.messages (session_id, seq, role, content, tool_calls, "
                "tool_call_id, tool_name) VALUES (%s, %s, %s, %s, %s::jsonb, %s, %s)",
                [(session_id, seq, *row) for seq, row in enumerate(rows, start=1)],
            )
    return session_id


# --- instrumentation for the breakdown ---------------------------------------------


@dataclass
class Timers:
    """(start, end) perf_counter pairs per key."""

    spans: dict[str, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))

    def add(self, key: str, start: float, end: float) -> None:
        self.spans[key].append((start, end))

    def clear(self) -> None:
        self.spans.clear()

    def within(self, key: str, lo: float, hi: float) -> list[float]:
        """Durations (ms) of the spans of `key` that start inside [lo, hi]."""
        return [(b - a) * 1000 for a, b in self.spans.get(key, []) if lo <= a <= hi]

    def nested(self, key: str, parent: str, lo: float, hi: float) -> list[float]:
        """Durations (ms) of `key` spans lying inside a `parent` span that starts in [lo, hi]."""
        parents = [(a, b) for a, b in self.spans.get(parent, []) if lo <= a <= hi]
        return [
            (b - a) * 1000
            for a, b in self.spans.get(key, [])
            if any(pa <= a and b <= pb for pa, pb in parents)
        ]


def _timed_async(timers: Timers, key: str | Callable[..., str], func: Any) -> Any:
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        name = key(*args, **kwargs) if callable(key) else key
        started = time.perf_counter()
        try:
            return await func(*args, **kwargs)
        finally:
            timers.add(name, started, time.perf_counter())

    return wrapper


def _timed_sync(timers: Timers, key: str | Callable[..., str], func: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        name = key(*args, **kwargs) if callable(key) else key
        started = time.perf_counter()
        try:
            return func(*args, **kwargs)
        finally:
            timers.add(name, started, time.perf_counter())

    return wrapper


@contextmanager
def instrumented(helix: HelixDBOS, mock: MockLLM) -> Iterator[Timers]:
    """Wrap timers around the step bodies, DBOS's step and transaction calls and the
    database calls DBOS makes for each step. Patched at runtime, restored on exit;
    nothing under helix_dbos/ is edited."""
    timers = Timers()
    rt = helix.runtime
    ds = rt.datasource
    sys_db = _get_dbos_instance()._sys_db

    def step_key(dbos: Any, ctx: Any, func: Any, options: Any, *_: Any) -> str:
        name = str(options.get("name") or "")
        return "step:" + ("helix.tool" if name.startswith("helix.tool:") else name)

    # (object, attribute, timer key); attributes this version of the code lacks are skipped.
    patches: list[tuple[Any, str, str | Callable[..., str]]] = [
        (dbos_module, "run_step_async", step_key),
        (ds, "run_tx_step_async", "tx"),
        (run_starts, "open_or_refuse", "body.open_run"),
        (agent_loop, "llm_step", "body.llm_step"),
        (tool_batch, "tool_step", "body.tool_step"),
        (step_commit, "write_step_rows", "llm.write_previous"),
        (step_commit.WriteAhead, "result", "llm.wait_write"),
        (repository, "interrupt_and_state", "llm.interrupt_check"),
        (llm_step_module, "write_chunks", "llm.write_chunks"),
        (rt.history, "read", "llm.history_read"),
        (mock, "generate_step", "llm.model_call"),
        # DBOS's system-database calls; they run in worker threads (asyncio.to_thread).
        (sys_db, "check_operation_execution", "sysdb.check_operation"),
        (sys_db, "record_operation_result", "sysdb.record_operation"),
        (sys_db, "get_workflow_owner", "sysdb.workflow_owner"),
    ]
    originals: list[tuple[Any, str, Any, bool]] = []
    for target, attr, key in patches:
        original = getattr(target, attr, None)
        if original is None:
            continue
        wrap = _timed_async if inspect.iscoroutinefunction(original) else _timed_sync
        originals.append((target, attr, original, attr in vars(target)))
        setattr(target, attr, wrap(timers, key, original))
    try:
        yield timers
    finally:
        for target, attr, original, own in reversed(originals):
            if own:
                setattr(target, attr, original)
            else:
                delattr(target, attr)


# --- the three measurements ------------------------------------------------------------


def median(values: list[float]) -> float:
    return statistics.median(values)


async def measure_ratio(bench: Bench, steps: int, repeats: int) -> dict[str, Any]:
    await bench.bare(steps)  # warm-up: pool connections, code paths, plan caches
    await bench.agent_run(steps)
    bare: list[float] = []
    runs: list[RunTiming] = []
    for _ in range(repeats):
        bare.append(await bench.bare(steps))
        runs.append(await bench.agent_run(steps))
    bare_ms = median(bare)
    agent_ms = median([r.per_step_ms for r in runs])
    caller_ms = median([r.caller_per_step_ms for r in runs])
    steady_ms = median([r.steady_ms for r in runs])
    return {
        "steps": steps,
        "repeats": repeats,
        "bare_step_ms": bare_ms,
        "agent_step_ms": agent_ms,
        "agent_caller_step_ms": caller_ms,
        "agent_steady_step_ms": steady_ms,
        "ratio": agent_ms / bare_ms,
        "ratio_steady": steady_ms / bare_ms,
        "ratio_caller": caller_ms / bare_ms,
        "result_wait_ms": median([(r.caller_s - r.workflow_s) * 1000 for r in runs]),
        # Per run, not per step: execute() -> first model call, last model call -> SUCCESS.
        "run_start_ms": median([r.first_call_s * 1000 for r in runs]),
        "run_end_ms": median(
            [(r.workflow_s - r.first_call_s - sum(r.intervals_s)) * 1000 for r in runs]
        ),
    }


async def measure_history(bench: Bench, steps: int, repeats: int) -> dict[str, Any]:
    sizes = (SMALL_HISTORY, LARGE_HISTORY)
    for size in sizes:  # warm-up
        await bench.agent_run(steps, bench.session_with_history(size))
    runs: dict[int, list[RunTiming]] = {size: [] for size in sizes}
    for rep in range(repeats):  # alternate, and alternate which goes first
        for size in sizes if rep % 2 == 0 else tuple(reversed(sizes)):
            runs[size].append(await bench.agent_run(steps, bench.session_with_history(size)))
    out: dict[str, Any] = {"steps": steps, "repeats": repeats}
    for size in sizes:
        out[f"first_call_ms_{size}"] = median([r.first_call_s * 1000 for r in runs[size]])
        out[f"steady_step_ms_{size}"] = median([r.steady_ms for r in runs[size]])
        out[f"per_step_ms_{size}"] = median([r.per_step_ms for r in runs[size]])
    small, large = SMALL_HISTORY, LARGE_HISTORY
    out["steady_ratio"] = out[f"steady_step_ms_{large}"] / out[f"steady_step_ms_{small}"]
    out["per_step_ratio"] = out[f"per_step_ms_{large}"] / out[f"per_step_ms_{small}"]
    out["first_call_ratio"] = out[f"first_call_ms_{large}"] / out[f"first_call_ms_{small}"]
    return out


BREAKDOWN_ROWS: list[tuple[str, str]] = [
    ("llm", "LLM step (DBOS step)"),
    ("llm.wait_write", "  body: wait for the previous step's write"),
    ("llm.interrupt_check", "  body: state + interrupt (first step only)"),
    ("llm.history_read", "  body: history read (incremental)"),
    ("llm.model_call", "  body: mock model call"),
    ("llm.write_chunks", "  body: live stream chunks (own tx)"),
    ("llm.rest", "  body: prompt, request, dump"),
    ("llm.sysdb", "  DBOS: system-db check + record"),
    ("llm.hops", "  DBOS: thread hops, serialization"),
    ("tool", "tool step (DBOS step)"),
    ("tool.body", "  body: tool_step"),
    ("tool.sysdb", "  DBOS: system-db check + record"),
    ("tool.hops", "  DBOS: thread hops, serialization"),
    ("tx", "datasource transactions (last step only)"),
    ("glue", "workflow code between steps"),
    ("step", "= agent step"),
    ("write_ahead", "(previous step's write: 1 statement, overlaps the LLM step's check)"),
]


async def measure_breakdown(bench: Bench, steps: int, history: int) -> dict[str, float]:
    """Mean wall-clock ms per agent step, split by where it goes.

    The window runs from the second model call to the last one: N-2 whole agent steps
    in steady state (the first step's full transcript read and the final text step are
    left out).
    """
    session_id = bench.session_with_history(history)
    with instrumented(bench.helix, bench.mock) as timers:
        await bench.agent_run(steps, session_id)
    calls = bench.script.calls
    lo, hi = calls[1], calls[-1]  # model call 2 .. model call N: N-2 whole steps
    n = len(calls) - 2
    # LLM steps 2 .. N-1 (each starts a little before its model call).
    llm_starts = sorted(a for a, _ in timers.spans["step:helix.llm"])
    llm_lo, llm_hi = llm_starts[1], llm_starts[-1]

    def inner(key: str) -> float:
        """Tool and commit spans (and what nests in them) of steps 2 .. N-1."""
        return sum(timers.within(key, lo, hi)) / n

    def llm(key: str) -> float:
        return sum(timers.within(key, llm_lo, llm_hi - 1e-9)) / n

    def sysdb(parent: str, lo: float, hi: float) -> float:
        keys = ("sysdb.check_operation", "sysdb.record_operation")
        return sum(sum(timers.nested(k, parent, lo, hi)) for k in keys) / n

    llm_parts = (
        "llm.wait_write",
        "llm.interrupt_check",
        "llm.history_read",
        "llm.model_call",
        "llm.write_chunks",
    )
    out: dict[str, float] = {"step": (hi - lo) * 1000 / n, "llm": llm("step:helix.llm")}
    for key in llm_parts:
        out[key] = llm(key)
    llm_body = llm("body.llm_step")
    out["llm.rest"] = llm_body - sum(out[k] for k in llm_parts)
    out["llm.sysdb"] = sysdb("step:helix.llm", llm_lo, llm_hi - 1e-9)
    out["llm.hops"] = out["llm"] - llm_body - out["llm.sysdb"]
    out["tool"] = inner("step:helix.tool")
    out["tool.body"] = inner("body.tool_step")
    out["tool.sysdb"] = sysdb("step:helix.tool", lo, hi)
    out["tool.hops"] = out["tool"] - out["tool.body"] - out["tool.sysdb"]
    out["tx"] = inner("tx")
    out["glue"] = out["step"] - out["llm"] - out["tool"] - out["tx"]
    # Started by the workflow before the LLM step, so it overlaps DBOS's check of it.
    out["write_ahead"] = llm("llm.write_previous")
    checks = timers.within("sysdb.check_operation", lo, hi)
    records = timers.within("sysdb.record_operation", lo, hi)
    out["sysdb_calls_per_step"] = (len(checks) + len(records)) / n
    out["sysdb_check_ms_each"] = statistics.mean(checks)
    out["sysdb_record_ms_each"] = statistics.mean(records)

    def first(key: str) -> float:
        spans = timers.spans.get(key)
        return (spans[0][1] - spans[0][0]) * 1000 if spans else 0.0

    out["first_history_read_ms"] = first("llm.history_read")
    out["open_run_body_ms"] = first("body.open_run")
    out["first_llm_step_ms"] = first("step:helix.llm")
    return out


async def measure_bare_breakdown(bench: Bench, steps: int) -> dict[str, float]:
    with instrumented(bench.helix, bench.mock) as timers:
        step_ms = await bench.bare(steps)
    checks = [(b - a) * 1000 for a, b in timers.spans["sysdb.check_operation"]]
    records = [(b - a) * 1000 for a, b in timers.spans["sysdb.record_operation"]]
    return {
        "step": step_ms,
        "sysdb_check_ms_each": statistics.mean(checks),
        "sysdb_record_ms_each": statistics.mean(records),
    }


async def pyinstrument_profile(bench: Bench, steps: int, path: Path) -> None:
    from pyinstrument import Profiler  # noqa: PLC0415 - optional: only with --pyinstrument

    session_id = bench.session_with_history(SMALL_HISTORY)
    profiler = Profiler(interval=0.0005, async_mode="enabled")
    with profiler:
        await bench.agent_run(steps, session_id)
    path.write_text(profiler.output_text(unicode=False, color=False))


# --- output ------------------------------------------------------------------------


def verdict(value: float, target: float) -> str:
    return f"target <= {target}: " + ("ok" if value <= target else "MISSES")


def print_report(
    kind: str,
    url: str,
    ratio: dict[str, Any],
    hist: dict[str, Any],
    breakdown: dict[int, dict[str, float]],
    bare: dict[str, float],
) -> None:
    s, b = SMALL_HISTORY, LARGE_HISTORY
    print(f"\nhelix_dbos agent-loop benchmark, database: {kind} ({redact_url(url)})")
    print(f"code measured: {Path(helix_dbos.__file__).parent}")
    print(
        f"cores: {os.cpu_count()}, python {sys.version.split()[0]}, N = {ratio['steps']} steps, "
        f"median of {ratio['repeats']} runs\n"
    )
    rows = [
        ("1. bare DBOS step (inside workflow)", f"{ratio['bare_step_ms']:.2f} ms", ""),
        (
            "   agent step = run / N",
            f"{ratio['agent_step_ms']:.2f} ms",
            "execute() -> workflow done",
        ),
        (
            "   agent step, steady (median)",
            f"{ratio['agent_steady_step_ms']:.2f} ms",
            "model call to model call",
        ),
        (
            "   agent step as the caller sees it",
            f"{ratio['agent_caller_step_ms']:.2f} ms",
            "execute() -> handle.result()",
        ),
        ("   ratio agent / bare", f"{ratio['ratio']:.2f}", verdict(ratio["ratio"], RATIO_TARGET)),
        ("   ratio steady / bare", f"{ratio['ratio_steady']:.2f}", ""),
        ("   ratio caller-seen / bare", f"{ratio['ratio_caller']:.2f}", ""),
        (
            "   per run: start / end",
            f"{ratio['run_start_ms']:.0f} / {ratio['run_end_ms']:.0f} ms",
            "execute() -> 1st model call / last -> done",
        ),
        (
            "   handle.result() lag after the end",
            f"{ratio['result_wait_ms']:.0f} ms",
            "DBOS polls every 1 s",
        ),
        (
            f"2. first model call, {s} msgs",
            f"{hist[f'first_call_ms_{s}']:.2f} ms",
            "execute() -> 1st model call",
        ),
        (f"   first model call, {b} msgs", f"{hist[f'first_call_ms_{b}']:.2f} ms", ""),
        (f"   steady step, {s} msgs", f"{hist[f'steady_step_ms_{s}']:.2f} ms", ""),
        (f"   steady step, {b} msgs", f"{hist[f'steady_step_ms_{b}']:.2f} ms", ""),
        (
            f"   steady ratio {b} / {s}",
            f"{hist['steady_ratio']:.2f}",
            verdict(hist["steady_ratio"], HISTORY_RATIO_TARGET),
        ),
        (
            f"   run / N ratio {b} / {s}",
            f"{hist['per_step_ratio']:.2f}",
            f"{hist['steps']}-step runs",
        ),
    ]
    for name, value, note in rows:
        print(f"{name:<38} {value:>10}  {note}")
    print(f"\n3. where a steady agent step goes (mean ms per step, N = {ratio['steps']}):")
    print(f"  {'':<38} {f'{s} msgs':>9} {f'{b} msgs':>10}")
    for key, label in BREAKDOWN_ROWS:
        print(f"  {label:<38} {breakdown[s][key]:9.2f} {breakdown[b][key]:10.2f}")
    br = breakdown[s]
    print(
        f"  system-db calls per agent step: {br['sysdb_calls_per_step']:.1f} "
        f"(check {br['sysdb_check_ms_each']:.2f} ms, record {br['sysdb_record_ms_each']:.2f} ms each)"
    )
    print(f"\n  first step of a run (ms) {'':<15} {f'{s} msgs':>9} {f'{b} msgs':>10}")
    for key, label in (
        ("open_run_body_ms", "execute(): open-run transaction body"),
        ("first_llm_step_ms", "first LLM step"),
        ("first_history_read_ms", "  of which the full history read"),
    ):
        print(f"  {label:<38} {breakdown[s][key]:9.2f} {breakdown[b][key]:10.2f}")
    print(
        f"  bare DBOS step: {bare['step']:.2f} ms (system-db check {bare['sysdb_check_ms_each']:.2f} ms "
        f"+ record {bare['sysdb_record_ms_each']:.2f} ms)"
    )


# --- main ------------------------------------------------------------------------------


# With --known-window, the agent's input budget: what a model whose context window is
# known (every OpenAI and Anthropic model in genai-prices) gets by default, large enough
# that the benchmark's sessions always fit, so each step takes the count-and-fit path.
KNOWN_WINDOW_TOKENS = 10**9


def launch_bench(
    database_url: str, known_window: bool = False, state_writes: bool = False
) -> Bench:
    """The ping agent on a scripted model, launched on the running event loop (workflows,
    steps and the benchmark share it). With `state_writes`, its tool is `tick`, which
    changes the session's state at every step."""
    script = Script("tick" if state_writes else "ping")
    mock = MockLLM(script)
    history = HistoryPolicy(max_input_tokens=KNOWN_WINDOW_TOKENS if known_window else None)
    agent = Agent(
        AGENT_NAME,
        system_prompt="You ping.",
        tools=[tick if state_writes else ping],
        max_steps=10_000,
        history=history,
    )
    helix = HelixDBOS(
        [agent],
        database_url=database_url,
        llm=mock,
        executor_id=f"bench-{uuid.uuid4().hex[:8]}",
        application_version="helix-bench",
    )
    helix.launch()
    return Bench(helix, agent, mock, script, database_url)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    server, kind = server_url(args.database_url)
    with fresh_database(server) as database_url:
        bench = launch_bench(database_url, args.known_window)
        helix = bench.helix
        try:
            ratio = await measure_ratio(bench, args.steps, args.repeats)
            hist = await measure_history(bench, args.history_steps, args.repeats)
            breakdown = {
                size: await measure_breakdown(bench, args.steps, size)
                for size in (SMALL_HISTORY, LARGE_HISTORY)
            }
            bare = await measure_bare_breakdown(bench, args.steps)
            if args.pyinstrument:
                await pyinstrument_profile(bench, args.steps, Path(args.pyinstrument))
        finally:
            bench.close()
            helix.shutdown()
    print_report(kind, server, ratio, hist, breakdown, bare)
    if args.pyinstrument:
        print(f"\npyinstrument profile of one {args.steps}-step run: {args.pyinstrument}")
    result = {
        "database": kind,
        "code": str(Path(helix_dbos.__file__).parent),
        "cores": os.cpu_count(),
        "known_window": args.known_window,
        "ratio": ratio,
        "history": hist,
        "breakdown": {str(k): v for k, v in breakdown.items()},
        "bare": bare,
        "targets": {"ratio": RATIO_TARGET, "history_ratio": HISTORY_RATIO_TARGET},
    }
    print("\n" + json.dumps(rounded(result)))
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=50, help="steps per run, N (default 50)")
    parser.add_argument("--repeats", type=int, default=5, help="runs per figure (median)")
    parser.add_argument(
        "--history-steps", type=int, default=20, help="agent steps per history run (default 20)"
    )
    parser.add_argument(
        "--database-url",
        help="PostgreSQL server (default $HELIX_BENCH_DATABASE_URL, else embedded)",
    )
    parser.add_argument(
        "--pyinstrument", metavar="PATH", help="also write a pyinstrument profile of one run"
    )
    parser.add_argument(
        "--known-window",
        action="store_true",
        help="give the agent an input budget, as a model with a known context window has",
    )
    args = parser.parse_args(argv)
    if args.steps < 4 or args.history_steps < 3:
        parser.error("--steps must be >= 4 and --history-steps >= 3")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
