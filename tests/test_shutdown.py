"""Shutting helix down from async code closes helix's connections, not only DBOS: the
live-chunk listener, the statement pool and the transaction engine. `shutdown()` called
on helix's own event loop (an async app's shutdown) closes them in tasks on that loop;
`shutdown_async()` closes them before it returns. A statement after that (the tail of a
workflow still running: the start of its session's next stored message comes after its
run's end is announced) is refused rather than opening a pool that no one closes."""

from __future__ import annotations

import json
import os
import sys
import uuid

import forkserver
import pytest
from conftest import REPO

from helix_dbos.errors import HelixShutDownError
from helix_dbos.server.http.error_responses import status_for

# Run in a process of its own: DBOS is one per process, and the test session's is in use.
# Every connection the script opens carries its application_name (PGAPPNAME), so the
# script counts its own backends from a connection under another name.
SCRIPT = """
import asyncio, json, os, sys, time
import psycopg
from helix_dbos import Agent, HelixDBOS, MockLLM
from helix_dbos.runtime.process.process_runtime import current_runtime
from helix_dbos.store.features import queued_messages as store
from helix_dbos.errors import HelixShutDownError

URL, HOW, TAG = sys.argv[1], sys.argv[2], os.environ["PGAPPNAME"]
agent = Agent("shutdown_probe", system_prompt="Answer.")
helix = HelixDBOS([agent], database_url=URL,
                  llm=MockLLM(lambda _: {"type": "text", "content": "done"}),
                  executor_id=f"{TAG}-exec", application_version="shutdown-probe")

def backends() -> dict[str, int]:
    with psycopg.connect(URL, application_name="observer") as conn:
        def count(query_like: str) -> int:
            return conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                "AND query LIKE %s", (TAG, query_like)).fetchone()[0]
        return {"listener": count("LISTEN%"), "statements": count("%helix.%"),
                "all": count("%")}

async def main() -> None:
    helix.launch()  # on this loop
    runtime = current_runtime()
    handle = await helix.execute(agent, "hello")
    chunks = [c async for c in helix.stream(handle.session_id, run_id=handle.run_id)]
    result = await handle.result()
    assert chunks and result.status == "completed", (result, chunks)
    before = backends()
    if HOW == "shutdown_async":
        await helix.shutdown_async()
        # Closed by the time it returned: the loop runs nothing more (a blocking wait), so
        # only what shutdown_async closed counts; the server drops a closed backend from
        # pg_stat_activity a moment later (longer on a loaded machine).
        deadline = time.monotonic() + 10
        while (after := backends()) != {"listener": 0, "statements": 0, "all": 0}:
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
    else:
        helix.shutdown()  # on the loop its connections belong to: the closes are tasks
        deadline = time.monotonic() + 10
        while (after := backends()) != {"listener": 0, "statements": 0, "all": 0}:
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
    try:  # what a workflow's tail still running would read
        await runtime.read(store.has_waiting, handle.session_id)
        late = "read"
    except HelixShutDownError:
        late = "refused"
    time.sleep(0.5)  # a connection it opened would show by now
    print(json.dumps({"before": before, "after": after, "late": late, "then": backends()}))

asyncio.run(main())
"""


@pytest.mark.parametrize("how", ["shutdown", "shutdown_async"])
def test_shutting_down_from_async_code_closes_the_listener_and_the_statement_pool(
    database_url: str, how: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELIX_")}
    env["PGAPPNAME"] = f"shutdown-{uuid.uuid4().hex[:8]}"
    done = forkserver.run(
        [sys.executable, "-c", SCRIPT, database_url, how],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    counts = json.loads(done.stdout.strip().splitlines()[-1])
    # While running: one LISTEN connection, and idle connections whose last query was
    # one of helix's (the open, the final write); none at all once shut down.
    assert counts["before"]["listener"] == 1 and counts["before"]["statements"] >= 1
    assert counts["after"] == {"listener": 0, "statements": 0, "all": 0}
    assert counts["late"] == "refused"
    assert counts["then"] == {"listener": 0, "statements": 0, "all": 0}


def test_a_request_after_the_shutdown_is_answered_503() -> None:
    """A request still served while its process shuts down is one to retry elsewhere."""
    assert status_for(HelixShutDownError("shut down")) == 503
