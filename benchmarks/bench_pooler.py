"""What PgBouncer in transaction mode costs an agent step, against direct connections.

Starts a PgBouncer of its own (tests/pgbouncer.py: transaction mode, a free port) in
front of the server, then runs `bench_agent_loop.py` alternately on the server directly
and through the pooler with HELIX_DB_POOLER=transaction (no prepared statements, DBOS
polling for messages), each in a process of its own, and prints each sitting's figures
and the medians' ratio, then one JSON line.

usage: .venv/bin/python benchmarks/bench_pooler.py [--database-url URL] [--rounds R]
       [--steps N] [--repeats K]

The server is --database-url, else $HELIX_BENCH_DATABASE_URL, else 127.0.0.1:5432.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from pgbouncer import PgBouncer  # noqa: E402 - the tests' own PgBouncer

DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"


def loop_figures(url: str, pooled: bool, steps: int, repeats: int) -> dict[str, float]:
    """One `bench_agent_loop.py` sitting: its agent step and bare DBOS step, in ms."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELIX_")}
    if pooled:
        env["HELIX_DB_POOLER"] = "transaction"
    done = subprocess.run(
        [
            sys.executable,
            str(HERE / "bench_agent_loop.py"),
            "--database-url",
            url,
            "--steps",
            str(steps),
            "--repeats",
            str(repeats),
            "--history-steps",
            "3",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
        check=True,
    )
    figures = json.loads(done.stdout.strip().splitlines()[-1])["ratio"]
    return {k: float(figures[k]) for k in ("agent_step_ms", "bare_step_ms", "ratio")}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--database-url", default=os.environ.get("HELIX_BENCH_DATABASE_URL"))
    parser.add_argument("--rounds", type=int, default=3, help="sittings of each, alternated")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    server = args.database_url or DEFAULT_SERVER
    with tempfile.TemporaryDirectory(prefix="bench-pooler-") as folder:
        bouncer = PgBouncer(Path(folder), server)
        try:
            pooled_url = bouncer.url(server)
            runs: dict[str, list[dict[str, float]]] = {"direct": [], "pooled": []}
            for _ in range(args.rounds):
                for name, url in (("direct", server), ("pooled", pooled_url)):
                    figures = loop_figures(url, name == "pooled", args.steps, args.repeats)
                    runs[name].append(figures)
                    print(name, json.dumps(figures), flush=True)
        finally:
            bouncer.stop()
    medians = {
        name: {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        for name, rows in runs.items()
    }
    step_ratio = medians["pooled"]["agent_step_ms"] / medians["direct"]["agent_step_ms"]
    bare_ratio = medians["pooled"]["bare_step_ms"] / medians["direct"]["bare_step_ms"]
    print(f"agent step, pooled / direct: {step_ratio:.2f}; bare DBOS step: {bare_ratio:.2f}")
    print(
        json.dumps({"medians": medians, "agent_step_ratio": step_ratio, "bare_ratio": bare_ratio})
    )


if __name__ == "__main__":
    main()
