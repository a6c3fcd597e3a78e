"""Retention (issue 30): rows and bytes before and after `prune` on a 10,000-step database.

One fresh database. `--sessions` sessions each run one `--steps`-step run for real
(MockLLM, one tool call per step, so every step writes its messages, usage, chunks and a
checkpoint, and DBOS records its workflow and steps). Then every run of the older half
of the sessions is aged by 40 days (its checkpoints, chunks and finish time), and
`helix.checkpoints.prune(older_than=30 days, keep_last=K)` runs once, in batches.

Printed per table: rows and bytes (`pg_total_relation_size`) before the prune, after it
(PostgreSQL keeps the freed pages for reuse, so the files stay as big), and after a
`VACUUM FULL` that gives them back (to show what the deleted rows took). Also how long
the prune took, and how many batches.

usage: .venv/bin/python benchmarks/bench_prune.py [--sessions 200] [--steps 50]
       [--keep-last 1] [--database-url URL] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from bench_agent_loop import fresh_database, server_url
from bench_common import launched_helix

from helix_dbos import Agent, HelixDBOS, MockLLM, tool
from helix_dbos.orchestration.types import LLMRequest
from helix_dbos.store.database import libpq_url, redact_url

TABLES = [
    "helix.checkpoints",
    "helix.stream_chunks",
    "helix.messages",
    "helix.usage_rows",  # the usage no message carries (migration 0027); the rest is in messages
    "helix.runs",
    "dbos.workflow_status",
    "dbos.operation_outputs",
    "dbos.workflow_input",
    "dbos.workflow_output",
]


def make_agent(steps: int) -> tuple[Agent, MockLLM]:
    @tool
    def note(i: int) -> str:
        """Note a step."""
        return f"noted {i}"

    def respond(request: LLMRequest) -> dict[str, Any]:
        done = len([m for m in request.messages if m.role == "assistant"])
        if done + 1 >= steps:
            return {"type": "text", "content": f"done after {done + 1} steps"}
        call = {"id": f"n{done}", "name": "note", "arguments": {"i": done}}
        return {"type": "tool_calls", "tool_calls": [call]}

    return Agent("bench_prune", tools=[note], max_steps=steps + 5), MockLLM(respond)


def measure(url: str) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        for table in TABLES:
            if conn.execute("SELECT to_regclass(%s)", (table,)).fetchone() == (None,):
                continue
            rows, size = conn.execute(
                # ONLY: `helix.messages` inherits `helix.usage_rows`.
                f"SELECT (SELECT count(*) FROM ONLY {table}), pg_total_relation_size(%s)",
                (table,),
            ).fetchone()  # type: ignore[misc]
            out[table] = {"rows": int(rows), "bytes": int(size)}
    return out


def vacuum_full(url: str) -> None:
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        for table in TABLES:
            if conn.execute("SELECT to_regclass(%s)", (table,)).fetchone() != (None,):
                conn.execute(f"VACUUM FULL {table}")


def age_half(url: str, sessions: list[str]) -> None:
    old = sessions[: len(sessions) // 2]
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute(
            "UPDATE helix.checkpoints SET created_at = created_at - interval '40 days' "
            "WHERE session_id = ANY(%s)",
            (old,),
        )
        conn.execute(
            "UPDATE helix.stream_chunks SET created_at = created_at - interval '40 days' "
            "WHERE session_id = ANY(%s)",
            (old,),
        )
        # A derived checkpoint's time is its step's last message's (migration 0030).
        conn.execute(
            "UPDATE helix.messages SET created_at = created_at - interval '40 days' "
            "WHERE session_id = ANY(%s)",
            (old,),
        )
        conn.execute(
            "UPDATE helix.runs SET finished_at = finished_at - interval '40 days' "
            "WHERE session_id = ANY(%s)",
            (old,),
        )


async def fill(helix: HelixDBOS, agent: Agent, sessions: int, parallel: int) -> list[str]:
    ids: list[str] = []
    pending = list(range(sessions))
    while pending:
        batch, pending = pending[:parallel], pending[parallel:]
        handles = [await helix.execute(agent, f"session {i}") for i in batch]
        for handle in handles:
            result = await handle.result()
            assert result.status == "completed", result.error
            ids.append(result.session_id)
        print(f"  {len(ids)}/{sessions} sessions", file=sys.stderr, flush=True)
    return ids


async def workflows_ended(url: str, count: int) -> None:
    """A caller has its result a moment before DBOS marks the workflow done."""
    for _ in range(600):
        with psycopg.connect(libpq_url(url), autocommit=True) as conn:
            (done,) = conn.execute(
                "SELECT count(*) FROM dbos.workflow_status WHERE status = 'SUCCESS' "
                "AND workflow_uuid LIKE 'helix-%'"
            ).fetchone()  # type: ignore[misc]
        if done >= count:
            return
        await asyncio.sleep(0.1)


def table(before: dict[str, Any], after: dict[str, Any], full: dict[str, Any]) -> str:
    lines = [
        "| table | rows before | rows after | bytes before | bytes after prune | "
        "bytes after VACUUM FULL |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    totals = [0, 0, 0, 0, 0]
    for name in before:
        b, a, f = before[name], after.get(name, {}), full.get(name, {})
        cells = [b["rows"], a.get("rows", 0), b["bytes"], a.get("bytes", 0), f.get("bytes", 0)]
        totals = [t + c for t, c in zip(totals, cells, strict=True)]
        lines.append(f"| {name} | " + " | ".join(f"{c:,}" for c in cells) + " |")
    lines.append("| **total** | " + " | ".join(f"**{c:,}**" for c in totals) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--steps", type=int, default=50, help="model calls per run")
    parser.add_argument("--keep-last", type=int, default=1)
    parser.add_argument("--parallel", type=int, default=20)
    parser.add_argument("--database-url")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    server, kind = server_url(args.database_url)
    with fresh_database(server) as url:
        agent, llm = make_agent(args.steps)
        with launched_helix(url, agent, llm, "prune") as helix:

            async def go() -> dict[str, Any]:
                began = time.monotonic()
                ids = await fill(helix, agent, args.sessions, args.parallel)
                filled = time.monotonic() - began
                await workflows_ended(url, args.sessions)
                age_half(url, ids)
                before = measure(url)
                began = time.monotonic()
                report = await helix.checkpoints.prune(
                    older_than=timedelta(days=30), keep_last=args.keep_last
                )
                took = time.monotonic() - began
                after = measure(url)
                vacuum_full(url)
                full = measure(url)
                return {
                    "database": kind,
                    "sessions": args.sessions,
                    "steps_per_run": args.steps,
                    "steps": args.sessions * args.steps,
                    "fill_seconds": round(filled, 1),
                    "prune_seconds": round(took, 2),
                    "report": report.model_dump(mode="json"),
                    "before": before,
                    "after": after,
                    "after_vacuum_full": full,
                }

            figures = asyncio.run(go())
    print(f"database: {kind} ({redact_url(server)})")
    print(
        f"{figures['steps']:,} steps in {figures['sessions']} sessions, filled in "
        f"{figures['fill_seconds']} s; half aged 40 days; prune(older_than=30d, "
        f"keep_last={args.keep_last}) took {figures['prune_seconds']} s "
        f"in {figures['report']['batches']} batches: {figures['report']}"
    )
    print(table(figures["before"], figures["after"], figures["after_vacuum_full"]))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
