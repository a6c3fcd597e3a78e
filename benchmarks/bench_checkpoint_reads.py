"""Time travel's reads (issue 48, after cut 4): `helix.checkpoints.list` and `.get` on one
session of many steps, and where their statements spend the time.

One fresh database. One session runs `--runs` runs of `--steps` model calls each for real
(MockLLM, one tool call per step, as `bench_prune.py`: each step writes its messages,
usage and chunks, and its checkpoint is stored or derived as the build does it). Then:

- `helix.checkpoints.list(session_id)`, `--repeat` times, median and minimum;
- `helix.checkpoints.get(session_id, checkpoint_id)` of the middle checkpoint (with its
  transcript), and of the last one, `--repeat` times each, median and minimum;
- `EXPLAIN (ANALYZE, BUFFERS)` of the statements list and get (middle) send for the rows,
  captured from the build's own `helix_dbos.store.checkpoint_rows` (so an older build on
  PYTHONPATH is explained with its own statements): the plan's execution time, and the
  whole plan into `--plans PATH` when given.

Twice: "fresh", right after the runs (a new database: no planner statistics unless
autovacuum came by, listed in the JSON as `auto_analyzed`), then "analyzed", after an
`ANALYZE` (what a database that has lived a while has). The calls alternate (list, get,
get last, list, ...) so a load spike on a shared box hits them all.

usage: .venv/bin/python benchmarks/bench_checkpoint_reads.py [--runs 10] [--steps 100]
       [--repeat 21] [--database-url URL] [--json PATH] [--plans PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from bench_agent_loop import fresh_database, server_url
from bench_common import launched_helix

import helix_dbos
from helix_dbos import Agent, MockLLM, tool
from helix_dbos.orchestration.types import LLMRequest
from helix_dbos.store import checkpoint_rows
from helix_dbos.store.database import libpq_url, redact_url


def make_agent(steps: int) -> tuple[Agent, MockLLM]:
    @tool
    def note(i: int) -> str:
        """Note a step."""
        return f"noted {i}"

    def respond(request: LLMRequest) -> dict[str, Any]:
        # The steps of this run: the assistant messages after the last user message.
        last_user = max(i for i, m in enumerate(request.messages) if m.role == "user")
        done = len([m for m in request.messages[last_user:] if m.role == "assistant"])
        if done + 1 >= steps:
            return {"type": "text", "content": f"done after {done + 1} steps"}
        call = {"id": f"n{last_user}_{done}", "name": "note", "arguments": {"i": done}}
        return {"type": "tool_calls", "tool_calls": [call]}

    return Agent("bench_ckread", tools=[note], max_steps=steps + 5), MockLLM(respond)


class _Recorder:
    """A connection that records the statements a reader sends and returns no rows."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def execute(self, statement: Any, params: Any = None) -> Any:
        self.sent.append((str(statement), dict(params or {})))

        class _Empty(list[Any]):
            def first(self) -> None:
                return None

        return _Empty()


def _psycopg_statement(statement: str) -> str:
    """SQLAlchemy's `:name` bind parameters as psycopg's `%(name)s` (`::type` casts stay)."""
    return re.sub(r"(?<![:\w]):([A-Za-z_]\w*)", r"%(\1)s", statement.replace("%", "%%"))


async def captured(session_id: str, checkpoint_id: str) -> dict[str, tuple[str, dict[str, Any]]]:
    rec = _Recorder()
    await checkpoint_rows.list_checkpoints(rec, session_id)  # type: ignore[arg-type]
    await checkpoint_rows.get_checkpoint(rec, session_id, checkpoint_id)  # type: ignore[arg-type]
    return {"list": rec.sent[0], "get": rec.sent[1]}


def explain(url: str, statement: str, params: dict[str, Any]) -> tuple[float, str]:
    """(execution ms, the plan) of one EXPLAIN (ANALYZE, BUFFERS), after one warm-up."""
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        query = "EXPLAIN (ANALYZE, BUFFERS) " + _psycopg_statement(statement)
        conn.execute(query, params).fetchall()
        lines = [str(r[0]) for r in conn.execute(query, params).fetchall()]
    ms = next(
        float(m.group(1)) for line in lines if (m := re.search(r"Execution Time: ([\d.]+)", line))
    )
    return ms, "\n".join(lines)


def analyze(url: str) -> None:
    """Statistics for the planner (a fresh database has none until autovacuum runs)."""
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute("ANALYZE")


def auto_analyzed(url: str) -> list[str]:
    """The helix tables autovacuum has analyzed already (the "fresh" phase has none, mostly)."""
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT relname FROM pg_stat_user_tables WHERE schemaname = 'helix' "
            "AND last_autoanalyze IS NOT NULL ORDER BY relname"
        ).fetchall()
    return [str(r[0]) for r in rows]


def stored_rows(url: str, session_id: str) -> int:
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        (count,) = conn.execute(
            "SELECT count(*) FROM helix.checkpoints WHERE session_id = %s", (session_id,)
        ).fetchone()  # type: ignore[misc]
    return int(count)


def stats(values: list[float]) -> dict[str, float]:
    return {
        "median_ms": round(statistics.median(values) * 1000, 2),
        "min_ms": round(min(values) * 1000, 2),
        "max_ms": round(max(values) * 1000, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=100, help="model calls per run")
    parser.add_argument("--repeat", type=int, default=21, help="timed calls of each read")
    parser.add_argument("--database-url")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--plans", metavar="PATH", help="write the EXPLAIN plans here")
    args = parser.parse_args()
    server, kind = server_url(args.database_url)
    with fresh_database(server) as url:
        agent, llm = make_agent(args.steps)
        with launched_helix(url, agent, llm, "ckread") as helix:

            async def go() -> dict[str, Any]:
                began = time.monotonic()
                session_id = f"ses_bench_{uuid.uuid4().hex[:8]}"
                for i in range(args.runs):
                    handle = await helix.execute(agent, f"run {i}", session_id=session_id)
                    result = await handle.result()
                    assert result.status == "completed", result.error
                    print(f"  {i + 1}/{args.runs} runs", file=sys.stderr, flush=True)
                filled = time.monotonic() - began
                checkpoints = await helix.checkpoints.list(session_id)
                middle = checkpoints[len(checkpoints) // 2].checkpoint_id
                last = checkpoints[-1].checkpoint_id
                view = await helix.checkpoints.get(session_id, middle)
                statements = await captured(session_id, middle)
                phases: dict[str, Any] = {}
                plans: list[str] = []
                for phase in ("fresh", "analyzed"):
                    if phase == "analyzed":
                        analyze(url)
                    else:
                        phases["auto_analyzed"] = auto_analyzed(url)
                    listed: list[float] = []
                    got: list[float] = []
                    got_last: list[float] = []
                    for _ in range(args.repeat):
                        t0 = time.perf_counter()
                        again = await helix.checkpoints.list(session_id)
                        listed.append(time.perf_counter() - t0)
                        t0 = time.perf_counter()
                        await helix.checkpoints.get(session_id, middle)
                        got.append(time.perf_counter() - t0)
                        t0 = time.perf_counter()
                        await helix.checkpoints.get(session_id, last)
                        got_last.append(time.perf_counter() - t0)
                        assert again == checkpoints
                    phases[phase] = {
                        "list": stats(listed),
                        "get": stats(got),
                        "get_last": stats(got_last),
                    }
                    for name, (statement, params) in statements.items():
                        ms, plan = explain(url, statement, params)
                        phases[phase][name]["explain_ms"] = round(ms, 2)
                        plans.append(f"-- {phase} {name}: {statement}\n-- {params}\n{plan}\n")
                return {
                    "session_id": session_id,
                    "checkpoint_id": middle,
                    "last_checkpoint_id": last,
                    "checkpoints": len(checkpoints),
                    "stored_rows": stored_rows(url, session_id),
                    "transcript": len(view.messages),
                    "fill_seconds": round(filled, 1),
                    **phases,
                    "plans": plans,
                }

            figures = asyncio.run(go())
    plans = figures.pop("plans")
    figures.update(
        {
            "database": kind,
            "build": str(Path(helix_dbos.__file__).resolve().parent),
            "runs": args.runs,
            "steps_per_run": args.steps,
            "repeat": args.repeat,
        }
    )
    print(f"database: {kind} ({redact_url(server)}); helix_dbos from {figures['build']}")
    print(
        f"one session of {args.runs} runs x {args.steps} steps, filled in "
        f"{figures['fill_seconds']} s: {figures['checkpoints']:,} checkpoints listed, "
        f"{figures['stored_rows']:,} stored; get() of {figures['checkpoint_id']} "
        f"({figures['transcript']:,} messages); {args.repeat} calls each"
    )
    print("| statistics | read | median ms | min ms | max ms | EXPLAIN ANALYZE ms |")
    print("|---|---|---:|---:|---:|---:|")
    reads = (
        ("list", "`checkpoints.list`"),
        ("get", "`checkpoints.get` (middle)"),
        ("get_last", "`checkpoints.get` (last)"),
    )
    for phase in ("fresh", "analyzed"):
        for name, label in reads:
            f = figures[phase][name]
            explained = f.get("explain_ms", "")
            print(
                f"| {phase} | {label} | {f['median_ms']} | {f['min_ms']} | {f['max_ms']} "
                f"| {explained} |"
            )
    if args.plans:
        Path(args.plans).write_text("\n".join(plans))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
