"""How fast memory search answers on 100,000 memories: text, vector and hybrid, p50/p95.

One fresh database; N memories (default 100,000) of one resource, made of random
sentences over a 2,000-word vocabulary, embedded by the hashing embedder (dimension
128) and loaded with COPY; the HNSW index is built by the store's own set-up. Then Q
searches per mode through `MemoryManager.search` (the query's embedding, the hop to
helix's loop and the SQL), timed one at a time after a warm-up. A second resource of
1,000 memories shows a small scope inside the large table.

usage: .venv/bin/python benchmarks/bench_memory.py [--memories N] [--queries Q]
       [--database-url URL]

The server is --database-url, else $HELIX_BENCH_DATABASE_URL, else the embedded
PostgreSQL (pgvector) in .helix/bench-pgdata; the database is dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import time
from pathlib import Path

import psycopg
from bench_agent_loop import fresh_database

from helix_dbos import HelixDBOS
from helix_dbos.memory import HashingEmbedder, MemoryManager
from helix_dbos.memory.store import vector_literal
from helix_dbos.store.database import libpq_url, resolve_database_url

REPO = Path(__file__).resolve().parent.parent
EMBEDDED_DIR = REPO / ".helix" / "bench-pgdata"
DIMENSION = 128
VOCABULARY = 2000
BIG, SMALL = "bench-big", "bench-small"


def sentences(rng: random.Random, words: list[str], n: int) -> list[str]:
    return [" ".join(rng.choices(words, k=rng.randint(6, 14))) for _ in range(n)]


def load(url: str, embedder: HashingEmbedder, resource: str, texts: list[str]) -> float:
    started = time.perf_counter()
    with psycopg.connect(libpq_url(url)) as conn, conn.cursor() as cur:
        with cur.copy(
            "COPY helix.memories (memory_id, resource_id, text, embedding, embedding_status, "
            "embedding_model, embedding_dimension, embedded_at) FROM STDIN"
        ) as copy:
            for i, body in enumerate(texts):
                vector = vector_literal(embedder.embed_one(body))
                copy.write_row(
                    (f"mem_{resource}_{i}", resource, body, vector, "complete",
                     embedder.model, DIMENSION, "now")
                )  # fmt: skip
        conn.commit()
        conn.execute("ANALYZE helix.memories")
    return time.perf_counter() - started


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def timed(memory: MemoryManager, queries: list[str], resource: str, mode: str) -> dict:
    for q in queries[:10]:  # warm-up
        await memory.search(q, resource_id=resource, mode=mode, limit=10)  # type: ignore[arg-type]
    times, found = [], 0
    for q in queries:
        started = time.perf_counter()
        hits = await memory.search(q, resource_id=resource, mode=mode, limit=10)  # type: ignore[arg-type]
        times.append((time.perf_counter() - started) * 1000)
        found += len(hits)
    return {
        "p50_ms": round(statistics.median(times), 2),
        "p95_ms": round(percentile(times, 0.95), 2),
        "mean_hits": round(found / len(queries), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--database-url", default=os.environ.get("HELIX_BENCH_DATABASE_URL"))
    args = parser.parse_args()
    server = args.database_url or resolve_database_url(None, data_dir=str(EMBEDDED_DIR))
    rng = random.Random(36)
    words = [f"w{rng.randrange(36**4):04x}{i}" for i in range(VOCABULARY)]
    embedder = HashingEmbedder(DIMENSION)
    with fresh_database(server) as url:
        helix = HelixDBOS(database_url=url, application_version="bench-memory")
        helix.launch()
        memory = helix.use_memory(embedder=embedder)
        asyncio.run(memory.ensure())  # the column exists before the load
        with psycopg.connect(libpq_url(url), autocommit=True) as conn:
            # HNSW is built far faster over loaded rows than row by row during the load
            conn.execute(f"DROP INDEX helix.memories_embedding_{DIMENSION}")
        load_s = load(url, embedder, BIG, sentences(rng, words, args.memories))
        load(url, embedder, SMALL, sentences(rng, words, 1000))
        started = time.perf_counter()
        with psycopg.connect(libpq_url(url), autocommit=True) as conn:
            conn.execute("SET maintenance_work_mem = '512MB'")  # the build fits in memory
            conn.execute(
                f"CREATE INDEX memories_embedding_{DIMENSION} ON helix.memories USING hnsw "
                f"((CAST(embedding AS public.vector({DIMENSION}))) public.vector_cosine_ops) "
                f"WHERE embedding_dimension = {DIMENSION}"
            )
        index_s = time.perf_counter() - started
        memory._support = None  # the store's own set-up finds the index it would make
        asyncio.run(memory.ensure())
        queries = [" ".join(rng.choices(words, k=3)) for _ in range(args.queries)]

        async def measure() -> dict:
            return {
                f"{scope}/{mode}": await timed(memory, queries, resource, mode)
                for scope, resource in (
                    (f"{args.memories}", BIG),
                    (f"1000-of-{args.memories}", SMALL),
                )
                for mode in ("text", "vector", "hybrid")
            }

        figures = asyncio.run(measure())
        with psycopg.connect(libpq_url(url)) as conn:
            vector = vector_literal(embedder.embed_one(queries[0]))
            plan = conn.execute(
                "EXPLAIN SELECT memory_id FROM helix.memories m WHERE embedding_dimension = "
                f"{DIMENSION} AND resource_id = %s ORDER BY CAST(m.embedding AS vector({DIMENSION})) "
                f"<=> CAST(%s AS vector({DIMENSION})) LIMIT 10",
                (BIG, vector),
            ).fetchall()
        uses_hnsw = any(f"memories_embedding_{DIMENSION}" in row[0] for row in plan)
        print(
            json.dumps(
                {
                    "memories": args.memories,
                    "dimension": DIMENSION,
                    "load_s": round(load_s, 1),
                    "hnsw_build_s": round(index_s, 1),
                    "queries_per_mode": args.queries,
                    "vector_plan_uses_hnsw": uses_hnsw,
                    "search": figures,
                },
                indent=2,
            )
        )
        helix.shutdown()


if __name__ == "__main__":
    main()
