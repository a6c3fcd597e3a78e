"""How long an approval takes to reach the tool, next to DBOS's own send -> recv.

One process, one fresh database, two measurements alternated round by round:

1. Baseline: a bare DBOS workflow waiting in `DBOS.recv_async`; from just before
   `DBOS.send_async` to the moment the workflow has the message (`recv_async`
   returned inside the workflow).
2. Helix: a run waiting for approval of a `require_approval=True` tool; from just
   before `await helix.approve(...)` to the first line of the tool's body.

Both wait on DBOS's notification listener (LISTEN/NOTIFY on the system database).
Timestamps are `time.perf_counter()` in this process: the workflows run on the
benchmark's event loop.

usage: .venv/bin/python benchmarks/bench_hitl.py [--rounds N] [--database-url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dbos._dbos as dbos_module
from bench_agent_loop import fresh_database, server_url
from bench_common import rounded
from dbos import DBOS
from dbos._dbos import _get_dbos_instance

import helix_dbos
from helix_dbos import Agent, HelixDBOS, MockLLM, ToolContext, tool
from helix_dbos.orchestration.types import LLMRequest
from helix_dbos.store.database import redact_url

AGENT_NAME = "bench_hitl"
TOOL_CALL_ID = "call_1"
SETTLE_S = 0.1  # pause before each answer, so the receiver is parked in recv

# --- timestamps shared with the workflows (same process, same loop) -------------

RECEIVED: dict[int, float] = {}  # baseline: message number -> recv returned in the workflow
STEPPED: dict[int, float] = {}  # baseline: message number -> the body of a step after the recv
RECV_RETURNED: list[float] = []  # every DBOS.recv_async return (see recv_timer)
TOOL_STARTED: dict[str, float] = {}  # helix: session_id -> tool body started
_arrived = asyncio.Event()  # set by the baseline workflow on each message


@DBOS.workflow(name="bench.recv_loop")
async def recv_loop(count: int) -> int:
    """The baseline: receive `count` messages, stamping each as it arrives."""
    for _ in range(count):
        message = await DBOS.recv_async("t", timeout_seconds=60)
        if message is None:
            raise RuntimeError("baseline recv timed out")
        RECEIVED[int(message["i"])] = time.perf_counter()
        await DBOS.run_step_async({"name": "bench.stamp"}, stamp, int(message["i"]))
        _arrived.set()
    return count


async def stamp(i: int) -> None:
    """A step's body after the baseline's recv: DBOS's own price of running a step."""
    STEPPED[i] = time.perf_counter()


@tool(require_approval=True)
async def gated(ctx: ToolContext) -> str:
    """A tool that needs a human's approval."""
    TOOL_STARTED[ctx.session_id] = time.perf_counter()
    return "done"


def responder(request: LLMRequest) -> dict[str, Any]:
    """First call: ask for the gated tool; after its result: answer."""
    if request.messages and request.messages[-1].role == "tool":
        return {"type": "text", "content": "ok"}
    return {
        "type": "tool_calls",
        "tool_calls": [{"id": TOOL_CALL_ID, "name": "gated", "arguments": {}}],
    }


@contextmanager
def recv_timer() -> Iterator[None]:
    """Stamp every `DBOS.recv_async` return (patched at runtime, restored on exit)."""
    descriptor = vars(DBOS)["recv_async"]
    original = DBOS.recv_async

    async def timed(*args: Any, **kwargs: Any) -> Any:
        result = await original(*args, **kwargs)
        RECV_RETURNED.append(time.perf_counter())
        return result

    DBOS.recv_async = timed  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        DBOS.recv_async = descriptor  # type: ignore[method-assign]


@dataclass
class Round:
    total_ms: float  # answer sent (call started) -> receiver running
    call_ms: float  # the send / approve call itself
    recv_ms: float  # call started -> recv_async returned in the workflow
    step_ms: float = 0.0  # baseline only: call started -> the body of a step after the recv
    spans: list[tuple[str, float, float]] = field(default_factory=list)  # (name, start, end) ms


SPANS: list[tuple[str, float, float]] = []  # (name, start, end) perf_counter, see span_timer


@contextmanager
def span_timer(helix: HelixDBOS) -> Iterator[None]:
    """Record DBOS steps and datasource transactions (by step name) while active."""
    ds = helix.runtime.datasource
    patches: list[tuple[Any, str, Any, bool]] = []

    def wrap(target: Any, attr: str, name_arg: int) -> None:
        original = getattr(target, attr)

        async def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await original(*args, **kwargs)
            finally:
                name = str(args[name_arg].get("name") or "?")
                SPANS.append((name, started, time.perf_counter()))

        patches.append((target, attr, original, attr in vars(target)))
        setattr(target, attr, timed)

    wrap(dbos_module, "run_step_async", 3)  # (dbos, ctx, func, options, args, kwargs)
    wrap(ds, "run_tx_step_async", 0)  # (options, func, *args)
    try:
        yield
    finally:
        for target, attr, original, own in reversed(patches):
            if own:
                setattr(target, attr, original)
            else:
                delattr(target, attr)


def _after(stamps: list[float], t: float) -> float:
    return min(s for s in stamps if s >= t)


async def baseline_rounds(rounds: int) -> list[Round]:
    handle = await DBOS.start_workflow_async(recv_loop, rounds)
    out: list[Round] = []
    for i in range(rounds):
        await asyncio.sleep(SETTLE_S)
        _arrived.clear()
        started = time.perf_counter()
        await DBOS.send_async(handle.workflow_id, {"i": i}, "t")
        returned = time.perf_counter()
        await asyncio.wait_for(_arrived.wait(), 30)
        arrived = RECEIVED[i]
        out.append(
            Round(
                total_ms=(arrived - started) * 1000,
                call_ms=(returned - started) * 1000,
                recv_ms=(_after(RECV_RETURNED, started) - started) * 1000,
                step_ms=(STEPPED[i] - started) * 1000,
            )
        )
    await handle.get_result()
    return out


async def wait_pending(helix: HelixDBOS, session_id: str) -> None:
    """Until the run's approval request is recorded (polled, 5 ms)."""
    deadline = time.monotonic() + 30
    while not await helix.pending_tool_calls(session_id):
        if time.monotonic() > deadline:
            raise TimeoutError(f"run of {session_id} never asked for approval")
        await asyncio.sleep(0.005)


async def helix_round(helix: HelixDBOS, agent: Agent) -> Round:
    handle = await helix.execute(agent, "go")
    await wait_pending(helix, handle.session_id)
    await asyncio.sleep(SETTLE_S)
    started = time.perf_counter()
    await helix.approve(handle.session_id, TOOL_CALL_ID)
    returned = time.perf_counter()
    result = await handle.result()
    if result.status != "completed":
        raise RuntimeError(f"benchmark run did not complete: {result}")
    tool_started = TOOL_STARTED[handle.session_id]
    return Round(
        total_ms=(tool_started - started) * 1000,
        call_ms=(returned - started) * 1000,
        recv_ms=(_after(RECV_RETURNED, started) - started) * 1000,
        spans=[
            (name, (a - started) * 1000, (b - started) * 1000)
            for name, a, b in SPANS
            if started <= a <= tool_started
        ],
    )


def listener_state() -> dict[str, Any]:
    sys_db = _get_dbos_instance()._sys_db
    return {
        "listen_notify": bool(getattr(sys_db, "use_listen_notify", False)),
        "listener_running": bool(getattr(sys_db, "_listener_running", False)),
        "fallback_recheck_s": sys_db._event_recheck_interval(),
    }


def timeline(rounds: list[Round]) -> list[dict[str, Any]]:
    """What ran between approve() and the tool body: per step name (in order of first
    start), the median start and duration in ms, and in how many rounds it ran."""
    by_name: dict[str, list[tuple[float, float]]] = {}
    for r in rounds:
        for name, a, b in r.spans:
            key = "helix.tool:*" if name.startswith("helix.tool:") else name
            by_name.setdefault(key, []).append((a, b - a))
    out = [
        {
            "step": name,
            "start_ms": statistics.median(a for a, _ in vals),
            "duration_ms": statistics.median(d for _, d in vals),
            "rounds": len(vals),
        }
        for name, vals in by_name.items()
    ]
    return sorted(out, key=lambda x: x["start_ms"])


def summarize(rounds: list[Round]) -> dict[str, float]:
    total = [r.total_ms for r in rounds]
    return {
        "median_ms": statistics.median(total),
        "p90_ms": statistics.quantiles(total, n=10)[-1],
        "min_ms": min(total),
        "max_ms": max(total),
        "call_median_ms": statistics.median([r.call_ms for r in rounds]),
        "recv_median_ms": statistics.median([r.recv_ms for r in rounds]),
        "step_median_ms": statistics.median([r.step_ms for r in rounds]),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    server, kind = server_url(args.database_url)
    with fresh_database(server) as database_url:
        agent = Agent(AGENT_NAME, system_prompt="You ask first.", tools=[gated])
        helix = HelixDBOS(
            [agent],
            database_url=database_url,
            llm=MockLLM(responder),
            executor_id=f"bench-{uuid.uuid4().hex[:8]}",
            application_version="helix-bench",
        )
        helix.launch()  # on this loop: workflows, steps and the timing code share it
        try:
            listener = listener_state()
            with recv_timer(), span_timer(helix):
                await baseline_rounds(3)  # warm-up
                await helix_round(helix, agent)
                bare: list[Round] = []
                agent_rounds: list[Round] = []
                for _ in range(args.rounds):  # alternate, one round each
                    bare.extend(await baseline_rounds(1))
                    agent_rounds.append(await helix_round(helix, agent))
        finally:
            helix.shutdown()
    b, h = summarize(bare), summarize(agent_rounds)
    result = {
        "database": kind,
        "code": str(Path(helix_dbos.__file__).parent),
        "cores": os.cpu_count(),
        "rounds": args.rounds,
        "listener": listener,
        "dbos_send_recv": b,
        "helix_approval": h,
        "ratio": h["median_ms"] / b["median_ms"],
        # Against DBOS's floor for reaching a step: its send -> recv, then a step's body.
        "ratio_to_step": h["median_ms"] / b["step_median_ms"],
        "helix_timeline": timeline(agent_rounds),
    }
    print_report(kind, server, result)
    print("\n" + json.dumps(rounded(result)))
    return result


def print_report(kind: str, url: str, r: dict[str, Any]) -> None:
    b, h = r["dbos_send_recv"], r["helix_approval"]
    print(f"\nhelix_dbos approval round trip, database: {kind} ({redact_url(url)})")
    print(f"code measured: {r['code']}")
    print(
        f"cores: {r['cores']}, python {sys.version.split()[0]}, {r['rounds']} rounds each "
        f"(alternated), medians"
    )
    lst = r["listener"]
    print(
        f"DBOS notification listener: LISTEN/NOTIFY {'on' if lst['listen_notify'] else 'OFF'}, "
        f"running {lst['listener_running']}, fallback re-check every {lst['fallback_recheck_s']:g} s\n"
    )
    print(f"{'':<44} {'DBOS send->recv':>16} {'helix approve->tool':>20}")
    rows = [
        ("answer sent -> receiver running (median)", "median_ms"),
        ("  p90", "p90_ms"),
        ("  min / max", None),
        ("  the send / approve() call itself", "call_median_ms"),
        ("  answer sent -> recv_async returned", "recv_median_ms"),
    ]
    for label, key in rows:
        if key is None:
            bv = f"{b['min_ms']:.1f} / {b['max_ms']:.1f}"
            hv = f"{h['min_ms']:.1f} / {h['max_ms']:.1f}"
        else:
            bv, hv = f"{b[key]:.2f} ms", f"{h[key]:.2f} ms"
        print(f"{label:<44} {bv:>16} {hv:>20}")
    print(f"{'ratio helix / DBOS (medians)':<44} {r['ratio']:>16.2f}")
    print(
        f"{'DBOS send -> a step body after the recv':<44} {b['step_median_ms']:>13.2f} ms"
        f"\n{'ratio helix / that (medians)':<44} {r['ratio_to_step']:>16.2f}"
    )
    print(
        f"\nhelix, approve() -> tool body, step by step (median start and duration, ms; "
        f"recv_async returns at {h['recv_median_ms']:.1f}, the tool body starts at "
        f"{h['median_ms']:.1f}):"
    )
    for t in r["helix_timeline"]:
        print(
            f"  {t['step']:<40} at {t['start_ms']:6.1f}  takes {t['duration_ms']:6.2f}"
            f"  ({t['rounds']} rounds)"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20, help="round trips each (default 20)")
    parser.add_argument(
        "--database-url",
        help="PostgreSQL server (default $HELIX_BENCH_DATABASE_URL, else embedded)",
    )
    args = parser.parse_args(argv)
    if args.rounds < 2:
        parser.error("--rounds must be >= 2")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
