"""Wake-ups (NOTIFY) go out after the writes they announce, never inside them (issue 48).

A NOTIFY inside a transaction makes its commit take PostgreSQL's cluster-wide NOTIFY
lock and hold it through the WAL flush: every step of every worker then commits one
at a time. These tests count, on a real LISTEN connection, the notifications a run
produces, against the batches `WakeUps` sent: the run's own statements add none.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import psycopg
import pytest
from helpers import calls
from sqlalchemy import text

from helix_dbos import tool
from helix_dbos.runtime.process.wake_ups import WakeUps
from helix_dbos.store.database import libpq_url
from helix_dbos.store.statement_pool import StatementPool
from helix_dbos.streaming.notifier import CHANNEL, RUN_END_CHANNEL


class CountingWakeUps(WakeUps):
    """Sends as `WakeUps` does, and counts in how many batches each (channel, key) went."""

    def __init__(self, pool: StatementPool) -> None:
        super().__init__(pool)
        self.batches: Counter[tuple[str, str]] = Counter()

    async def _send_batch(self, batch: list[tuple[str, str]]) -> None:
        self.batches.update(batch)
        await super()._send_batch(batch)


def listener(database_url: str) -> psycopg.Connection:
    conn = psycopg.connect(libpq_url(database_url), autocommit=True)
    conn.execute(f"LISTEN {CHANNEL}")
    conn.execute(f"LISTEN {RUN_END_CHANNEL}")
    return conn


def received(conn: psycopg.Connection, until: float) -> Counter[tuple[str, str]]:
    got: Counter[tuple[str, str]] = Counter()
    for note in conn.notifies(timeout=max(0.05, until - time.monotonic())):
        got[(note.channel, note.payload)] += 1
    return got


def drain(conn: psycopg.Connection, expected: Counter[tuple[str, str]], keys: set[str]) -> Counter:
    """What `conn` received for `keys`: until it holds `expected` (10 s at most), then
    another half second, so that one notification too many would show."""
    got: Counter[tuple[str, str]] = Counter()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(got[k] < n for k, n in expected.items()):
        got.update(received(conn, time.monotonic() + 0.2))
    got.update(received(conn, time.monotonic() + 0.5))
    return Counter({k: n for k, n in got.items() if k[1] in keys})


async def test_a_run_notifies_only_through_its_wake_ups(helix, make_agent, mock_llm, database_url):
    @tool
    async def ping(n: int) -> str:
        """Answer a ping."""
        return f"pong {n}"

    agent = make_agent(tools=[ping])
    for _ in range(2):
        mock_llm.add_responses(
            calls(("p1", "ping", {"n": 1})),
            calls(("p2", "ping", {"n": 2})),
            {"type": "text", "content": "done"},
            agent=agent.name,
        )
    runtime = helix.runtime
    counting = CountingWakeUps(runtime.statement_pool)
    runtime.wake_ups, before = counting, runtime.wake_ups
    conn = listener(database_url)
    try:
        first = await helix.execute(agent, "ping twice")
        assert (await first.result()).output == "done"
        # A second run on the session opens through a transaction (`helix.open_run`).
        second = await helix.execute(agent, "again", session_id=first.session_id)
        assert (await second.result()).output == "done"
        keys = {first.session_id, first.run_id, second.run_id}
        got = await asyncio.to_thread(drain, conn, counting.batches, keys)
    finally:
        runtime.wake_ups = before
        conn.close()

    sent = Counter({k: n for k, n in counting.batches.items() if k[1] in keys})
    # Every step with chunks, each run's open (the second's) and end were announced...
    assert sent[(CHANNEL, first.session_id)] >= 2
    assert sent[(RUN_END_CHANNEL, first.run_id)] >= 1
    assert sent[(RUN_END_CHANNEL, second.run_id)] >= 1
    # ... and nothing else notified: one notification a batch, none from the writes.
    assert got == sent


async def test_wake_ups_coalesce_and_do_not_wait_for_the_flush(database_url):
    pool = StatementPool(libpq_url(database_url), max_size=1)
    wake_ups = CountingWakeUps(pool)
    conn = listener(database_url)
    try:
        for key in ["a", "b", "a", "c", "b"]:
            wake_ups.send_soon(CHANNEL, f"wake-test-{key}")
        await wake_ups.close()  # waits for what was queued
        got = await asyncio.to_thread(
            drain, conn, wake_ups.batches, {f"wake-test-{k}" for k in "abc"}
        )
        # Queued without a pause between them: one batch, each key once.
        assert wake_ups.batches == Counter({(CHANNEL, f"wake-test-{k}"): 1 for k in "abc"})
        assert got == wake_ups.batches
        # `synchronous_commit` was off for the wake-ups' own transaction only.
        async with pool.connection() as pooled:
            shown = (await pooled.execute(text("SHOW synchronous_commit"))).one()[0]
        assert shown == "on"
    finally:
        conn.close()
        await pool.close()


@pytest.mark.parametrize("wake", [True, False])
def test_the_final_write_function_notifies_only_when_asked(database_url, wake):
    """An older build calls `helix.end_step_and_run` without `p_wake` and still gets its
    NOTIFYs with the commit; this build passes false and sends them itself."""
    conn = listener(database_url)
    args = ["s-none", "r-none", "a", 1, "[]", 0, 0, None, "[]", "[]", 0, 0]
    args += ["completed", None, None, None, True, None, None, None]
    with psycopg.connect(libpq_url(database_url), autocommit=True) as writer:
        if wake:  # the older build's call: 20 arguments
            writer.execute(
                "SELECT * FROM helix.end_step_and_run(" + ", ".join(["%s"] * 20) + ")", args
            )
        else:
            writer.execute(
                "SELECT * FROM helix.end_step_and_run(" + ", ".join(["%s"] * 21) + ")",
                [*args, False],
            )
    try:
        got = received(conn, time.monotonic() + 1.0)
    finally:
        conn.close()
    expected = {(CHANNEL, "s-none"): 1, (RUN_END_CHANNEL, "r-none"): 1} if wake else {}
    assert {k: n for k, n in got.items() if k[1] in {"s-none", "r-none"}} == expected
