"""`HelixDBOS.shutdown()` called on its own event loop (an async app's shutdown, such as a
FastAPI lifespan) closes helix's connections as a call from another thread does: the
live-chunk listener and the statement pool, not only DBOS."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

from conftest import REPO

# Run in a process of its own: DBOS is one per process, and the test session's is in use.
# Every connection the script opens carries its application_name (PGAPPNAME), so the
# script can count its own backends from a connection under another name.
SCRIPT = """
import asyncio, json, os, sys
import psycopg
from helix_dbos import Agent, HelixDBOS, MockLLM

URL, TAG = sys.argv[1], os.environ["PGAPPNAME"]
agent = Agent("shutdown_probe", system_prompt="Answer.")
helix = HelixDBOS([agent], database_url=URL, llm=MockLLM(lambda _: {"type": "text", "content": "done"}),
                  executor_id=f"{TAG}-exec", application_version="shutdown-probe")

def backends(query_like: str) -> int:
    with psycopg.connect(URL, application_name="observer") as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
            "AND query LIKE %s", (TAG, query_like)).fetchone()[0]

async def main() -> None:
    helix.launch()  # on this loop
    handle = await helix.execute(agent, "hello")
    chunks = [c async for c in helix.stream(handle.session_id, run_id=handle.run_id)]
    result = await handle.result()
    assert chunks and result.status == "completed", (result, chunks)
    before = {"listener": backends("LISTEN%"), "statements": backends("%helix.%")}
    helix.shutdown()  # on the loop its connections belong to
    await asyncio.sleep(0.5)
    after = {"listener": backends("LISTEN%"), "statements": backends("%helix.%")}
    print(json.dumps({"before": before, "after": after}))

asyncio.run(main())
"""


def test_shutdown_on_its_own_loop_closes_the_listener_and_the_statement_pool(
    database_url: str,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELIX_")}
    env["PGAPPNAME"] = f"shutdown-{uuid.uuid4().hex[:8]}"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, database_url],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    counts = json.loads(done.stdout.strip().splitlines()[-1])
    # While running: one LISTEN connection, and idle connections whose last query was
    # one of helix's (the open, the final write); none of either once shut down.
    assert counts["before"]["listener"] == 1 and counts["before"]["statements"] >= 1
    assert counts["after"] == {"listener": 0, "statements": 0}
