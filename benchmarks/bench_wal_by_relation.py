"""Where a step's WAL goes: the records of one run, by table or index and record type.

The peer benchmark gives the WAL a helix step writes (5.3 kB, against 2.5–2.6 kB for the
DBOS-based peers); this says which relation each byte is for, so that a cut can be
aimed (issue 48). Needs `pg_walinspect` (PostgreSQL 15+) and a superuser.

    .venv/bin/python benchmarks/bench_wal_by_relation.py --database-url postgresql://postgres@127.0.0.1:5432/postgres

A fresh database, the agent loop benchmark's ping agent (`bench_agent_loop.launch_bench`),
two warm-up runs, a `CHECKPOINT`, then one `--steps`-step run on a session seeded with
`--history` messages. Every WAL record of that run that touches a block of this database,
and every commit record of those transactions, grouped by relation (`pg_filenode_relation`)
and record type, per agent step. Full-page images are counted apart: right after the
checkpoint each block's first change writes one, which a busy server's steady state
spreads over many steps.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_agent_loop import fresh_database, launch_bench

from helix_dbos.store.database import libpq_url


def by_relation(
    conn: psycopg.Connection[Any], start: str, end: str
) -> tuple[Counter[tuple[str, str]], Counter[tuple[str, str]], int]:
    """(bytes, records) by (relation, record type) between two LSNs, and the full-page
    image bytes among them."""
    row = conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()
    assert row is not None
    block = re.compile(rf"rel \d+/{row[0]}/(\d+)")
    records = conn.execute(
        "SELECT xid::text, record_type, record_length, fpi_length, coalesce(block_ref, '') "
        "FROM pg_get_wal_records_info(%s::pg_lsn, %s::pg_lsn)",
        (start, end),
    ).fetchall()
    ours = {xid for xid, _, _, _, ref in records if block.search(ref) and xid != "0"}
    names: dict[int, str] = {}
    sizes: Counter[tuple[str, str]] = Counter()
    counts: Counter[tuple[str, str]] = Counter()
    images = 0
    for xid, record_type, length, image, ref in records:
        hit = block.search(ref)
        if hit is None and xid not in ours:
            continue  # another database's
        relation = "(commit)"
        if hit is not None:
            node = int(hit.group(1))
            if node not in names:
                found = conn.execute(
                    "SELECT coalesce(pg_filenode_relation(0, %s)::text, %s)", (node, str(node))
                ).fetchone()
                names[node] = found[0] if found else str(node)
            relation = names[node]
        key = (relation, record_type.split()[0])
        sizes[key] += length - image
        counts[key] += 1
        images += image
    return sizes, counts, images


async def run(database_url: str, steps: int, history: int) -> None:
    with fresh_database(database_url) as url:
        bench = launch_bench(url)
        conn = psycopg.connect(libpq_url(url), autocommit=True)
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
            for _ in range(2):
                await bench.agent_run(steps)
            session_id = bench.session_with_history(history)
            conn.execute("CHECKPOINT")
            start = conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
            await bench.agent_run(steps, session_id)
            await asyncio.sleep(0.5)  # the run's wake-ups and DBOS's last writes
            end = conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
            assert start is not None and end is not None
            sizes, counts, images = by_relation(conn, str(start[0]), str(end[0]))
        finally:
            conn.close()
            bench.close()
            bench.helix.shutdown()
    total = sum(sizes.values())
    print(
        f"{steps}-step run, {history} messages of history: {total / steps:.0f} B of WAL a "
        f"step without full-page images ({images / steps:.0f} B of them a step after the "
        "checkpoint)\n"
    )
    print("| relation | record | B a step | records a step |\n|---|---|---:|---:|")
    for (relation, record), size in sorted(sizes.items(), key=lambda kv: -kv[1]):
        if size / steps >= 5:
            n = counts[(relation, record)] / steps
            print(f"| {relation} | {record} | {size / steps:.0f} | {n:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--steps", type=int, default=21)
    parser.add_argument("--history", type=int, default=10)
    args = parser.parse_args()
    asyncio.run(run(args.database_url, args.steps, args.history))


if __name__ == "__main__":
    main()
