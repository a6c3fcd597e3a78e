"""A run's first read of a session the process has not cached, timed per read.

The one part of a run that still grows with the session (issue 48): the first step reads
every message and builds them, once a run, when this process holds no transcript of the
session (a fresh process, a session last run by another worker, one written with SQL).
This times `repository.first_read` and the `Transcript` built from it, whichever
`helix_dbos` Python imports: run it on this checkout and, in the same sitting, with
`PYTHONPATH=<a checkout of older code>`, and compare.

    .venv/bin/python benchmarks/bench_cold_read.py --database-url postgresql://postgres@127.0.0.1:5432/postgres

A fresh database; one session of `--messages` messages, as the agent loop benchmark
seeds them (`bench_agent_loop.create_session_with_history`: a user message, a tool call,
its result, an answer, over again), read `--reads` times on one psycopg connection after
`--warmup` untimed reads. Prints one JSON line: the code's path, and the median, p10 and
p90 in milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_agent_loop import create_session_with_history, fresh_database
from bench_common import spread

import helix_dbos
from helix_dbos import HelixDBOS
from helix_dbos.orchestration.transcript import Transcript
from helix_dbos.store import repository as repo
from helix_dbos.store.database import libpq_url
from helix_dbos.store.driver import DriverConnection


async def measure(url: str, session_id: str, messages: int, reads: int, warmup: int) -> list[float]:
    raw = await psycopg.AsyncConnection.connect(libpq_url(url), autocommit=True)
    try:
        conn = DriverConnection(raw)
        timings: list[float] = []
        for i in range(warmup + reads):
            started = time.perf_counter()
            read = await repo.first_read(conn, "wf_none", session_id, "run_none", after_seq=0)
            Transcript(m for _, m in read.messages)
            elapsed = time.perf_counter() - started
            assert len(read.messages) >= messages
            if i >= warmup:
                timings.append(elapsed * 1e3)
        return timings
    finally:
        await raw.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--reads", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args()
    with fresh_database(args.database_url) as url:
        HelixDBOS(database_url=url).migrate()  # helix's schema and DBOS's system tables
        with psycopg.connect(libpq_url(url), autocommit=True) as conn:
            session_id = create_session_with_history(conn, args.messages)
        timings = asyncio.run(measure(url, session_id, args.messages, args.reads, args.warmup))
    code = str(Path(helix_dbos.__file__).resolve().parent.parent)
    print(
        json.dumps(
            {"code": code, "messages": args.messages, "reads": len(timings)} | spread(timings, "ms")
        )
    )


if __name__ == "__main__":
    main()
