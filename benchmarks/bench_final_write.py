"""The final write alone: `end_step_and_run` on a real run, timed per call.

Issue 47 moved the final write from one 4,095-character statement built in Python to a
call of `helix.end_step_and_run` (migrations/0020). This measures what a run pays for
its last write, whichever the code imported is: run it once on this checkout and once
with `PYTHONPATH=<a checkout of the older code>` in the same sitting, and compare.

    .venv/bin/python benchmarks/bench_final_write.py --database-url postgresql://postgres@127.0.0.1:5432/postgres

Each call opens a fresh run (a new session, untimed), then times the last step's write
(an assistant message calling two tools, their two results, three usage rows, one event
and the terminal chunk) on one psycopg connection, as runs send it (`--no-flush`: with
`synchronous_commit = off`, the statement's own cost without the disk flush). Prints one
JSON line: the code's path, the calls, and the median, p10 and p90 in microseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_agent_loop import fresh_database
from bench_common import spread

import helix_dbos
from helix_dbos.orchestration.types import LLMUsage, Message, ToolCall
from helix_dbos.store import repository as repo
from helix_dbos.store.database import libpq_url
from helix_dbos.store.driver import DriverConnection
from helix_dbos.store.migrations import apply_migrations
from helix_dbos.store.repository import UsageRecord
from helix_dbos.store.run_bounds import end_step_and_run, open_new_session_run


def last_step(run_id: str) -> dict[str, object]:
    calls = [ToolCall(id=f"c{i}", name="ping", arguments={"i": i}) for i in range(2)]
    messages = [Message(role="assistant", content="thinking", tool_calls=calls)]
    messages += [
        Message(role="tool", content=f"pong {i}", tool_call_id=f"c{i}", tool_name="ping")
        for i in range(2)
    ]
    llm = LLMUsage(model="m", input_tokens=100, output_tokens=7)
    usage = [UsageRecord(f"{run_id}:3:llm", "llm", 3, llm=llm)]
    usage += [
        UsageRecord(f"{run_id}:3:tool:c{i}", "tool", 3, tool_name="ping", duration_ms=1.5)
        for i in range(2)
    ]
    return {
        "agent_name": "bench",
        "step": 3,
        "messages": messages,
        "state": {"n": 3},
        "usage": usage,
        "step_chunks": [(f"{run_id}:3:e", "custom", {"event": "tick"})],
        "head_messages": 0,
        "status": "completed",
        "output": {"k": 1},
        "error": None,
        "stop_reason": None,
        "end_chunks": [(f"{run_id}:end", "run_completed", {"output": {"k": 1}})],
        "notify": True,
    }


async def measure(url: str, calls: int, warmup: int, no_flush: bool) -> list[float]:
    raw = await psycopg.AsyncConnection.connect(libpq_url(url), autocommit=True)
    if no_flush:  # the statement's own cost, without the wait for the disk flush
        await raw.execute("SET synchronous_commit = off")
    conn = DriverConnection(raw)
    timings: list[float] = []
    try:
        for i in range(warmup + calls):
            session_id, run_id = f"ses_{uuid.uuid4().hex}", f"run_{uuid.uuid4().hex}"
            await open_new_session_run(
                conn,
                session_id=session_id,
                run_id=run_id,
                workflow_id=f"wf_{run_id}",
                agent_name="bench",
                state={"n": 0},
                max_steps=10,
                options={},
                messages=[Message(role="user", content="go")],
            )
            await repo.unlock_run_start(conn, run_id)
            args = last_step(run_id)
            started = time.perf_counter()
            ended = await end_step_and_run(conn, session_id=session_id, run_id=run_id, **args)  # type: ignore[arg-type]
            elapsed = time.perf_counter() - started
            assert ended.ended and ended.usage["tool_calls"] == 2
            if i >= warmup:
                timings.append(elapsed * 1e6)
    finally:
        await raw.close()
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--no-flush", action="store_true", help="synchronous_commit = off")
    args = parser.parse_args()
    with fresh_database(args.database_url) as url:
        apply_migrations(url)
        with psycopg.connect(libpq_url(url), autocommit=True) as conn:
            # DBOS's table the older statement names (no DBOS launched here: nothing in it)
            conn.execute(
                "CREATE SCHEMA IF NOT EXISTS dbos; CREATE TABLE IF NOT EXISTS "
                "dbos.datasource_outputs (workflow_id text NOT NULL, function_id int NOT NULL, "
                "PRIMARY KEY (workflow_id, function_id))"
            )
        timings = asyncio.run(measure(url, args.calls, args.warmup, args.no_flush))
    code = str(Path(helix_dbos.__file__).resolve().parent.parent)
    print(json.dumps({"code": code, "calls": len(timings)} | spread(timings, "us")))


if __name__ == "__main__":
    main()
