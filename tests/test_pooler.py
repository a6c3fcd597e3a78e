"""Behind PgBouncer in transaction mode (issue 51), as managed PostgreSQL serves it.

A PgBouncer of the test's own (tests/pgbouncer.py) stands in front of the test server
(or, for the outage, of a cluster the test starts); every helix process gets only the
pooler's URL and `HELIX_DB_POOLER=transaction` (and, where a test says so, a direct URL
for LISTEN and the heartbeat). The worker processes are tests/crash_app.py's.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import forkserver
import psycopg
import pytest
import test_double_texting_crash
import test_limits
from helpers import sql
from pg_cluster import Cluster
from pgbouncer import PgBouncer
from test_crash import assert_transcript_is_clean, lines, sigkill, spawn, wait_for
from test_workers import executor_of, run_status, started, stop, workflow_row

from helix_dbos.store.database import libpq_url
from helix_dbos.store.pooler import DIRECT, pooler_warning

pytestmark = pytest.mark.crash
POOLED = {"HELIX_DB_POOLER": "transaction"}


@pytest.fixture
def pooler(tmp_path: Path, database_url: str) -> Iterator[PgBouncer]:
    bouncer = PgBouncer(tmp_path / "pgbouncer", database_url)
    yield bouncer
    bouncer.stop()


@pytest.fixture
def pooled_url(pooler: PgBouncer, database_url: str) -> str:
    return pooler.url(database_url)


def _approve(url: str, run_id: str, tool_call_id: str) -> float:
    """Send the approval from a process of its own; when it was sent (time.time())."""
    script = (
        "import sys, time; from dbos import DBOSClient\n"
        "c = DBOSClient(system_database_url=sys.argv[1])\n"
        "c.send(sys.argv[2], {'tool_call_id': sys.argv[3], 'approved': True}, 'helix.approval')\n"
        "print(time.time(), flush=True)\n"
        "c.destroy()\n"
    )
    sender = forkserver.run(
        [sys.executable, "-c", script, libpq_url(url), f"helix-{run_id}", tool_call_id],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert sender.returncode == 0, sender.stderr
    return float(sender.stdout.split()[0])


def _results(proc, count: int) -> list[dict]:
    out, _ = proc.communicate(timeout=240)
    rows = [json.loads(line) for line in out.strip().splitlines()]
    return [r for r in rows if "status" in r][:count]


def test_launch_warns_when_the_url_reaches_pgbouncer_unannounced(pooled_url, database_url):
    warning = pooler_warning(pooled_url, DIRECT)
    assert warning is not None and "PgBouncer" in warning and "HELIX_DB_POOLER" in warning
    assert pooler_warning(database_url, DIRECT) is None, "a direct URL is left alone"


def test_ten_runs_of_a_tool_agent_complete_through_the_pooler(pooled_url, database_url, tmp_path):
    """Four tool calls and a finish per run, ten runs started at once: psycopg prepares a
    statement after five executions, which a pooled server connection does not have."""
    env = {**POOLED, "CRASH_APP_RUNS": "10", "CRASH_APP_CONCURRENT_STARTS": "1"}
    proc = spawn("run", pooled_url, "-", "parallel", tmp_path, env=env)
    results = _results(proc, 10)
    assert proc.returncode == 0, (tmp_path / "pgbouncer" / "pgbouncer.log").read_text()[-3000:]
    assert [r["status"] for r in results] == ["completed"] * 10, results
    for i in (0, 1, 3):
        assert len(lines(tmp_path, f"fast_{i}.log")) == 10
    rows = sql(database_url, "SELECT session_id, run_id FROM helix.runs")
    assert len(rows) == 10
    for session_id, run_id in rows:
        assert_transcript_is_clean(database_url, session_id, run_id)
    # Nothing was prepared on the server: no statement of helix's or DBOS's outlives
    # the transaction the pooler lent a connection for.
    assert sql(database_url, "SELECT count(*) FROM pg_prepared_statements") == [(0,)]


@pytest.mark.parametrize("direct", [False, True], ids=["poll", "direct_listen"])
def test_an_approval_reaches_its_run_within_the_stated_time(
    pooled_url, database_url, tmp_path, direct
):
    """Without a direct URL DBOS polls every 0.5 s (`HELIX_POOLER_POLL_SECONDS`); the
    answer is sent through the pooler too, as a user's app would."""
    env = {**POOLED, **({"HELIX_LISTEN_DATABASE_URL": database_url} if direct else {})}
    proc = spawn("start", pooled_url, "-", "approval", tmp_path, env=env)
    try:
        run_id = started(proc)["run_id"]
        wait_for(lambda: run_status(database_url, run_id) == "waiting")
        time.sleep(1.0)  # the wait is parked on its recv, not about to re-read
        sent_at = _approve(pooled_url, run_id, "g1")
        ran = tmp_path / "guarded_delete.log"
        wait_for(ran.exists, timeout=30)
        took = ran.stat().st_mtime - sent_at
        assert took <= 1.0, f"the approval reached its run {took:.2f}s after it was sent"
        wait_for(lambda: run_status(database_url, run_id) == "completed")
    finally:
        stop(proc)


def test_a_killed_workers_run_completes_on_another_worker_through_the_pooler(
    pooled_url, database_url, tmp_path
):
    """The lease alone tells a dead worker behind a pooler (4 s in crash_app): neither
    `application_name` nor a backend pid means anything there. No live worker is
    fenced meanwhile."""
    a = spawn("start", pooled_url, "-", "tool", tmp_path, env=POOLED)
    b = None
    try:
        first = started(a)
        run_id, session_id = first["run_id"], first["session_id"]
        a_id = executor_of(database_url, a)
        b = spawn("serve", pooled_url, "-", "tool", tmp_path, env=POOLED)
        b_id = started(b)["ready"]
        wait_for(lambda: (tmp_path / "in_slow_b").exists())
        time.sleep(3)  # both heartbeat through the pooler: neither claims the other
        assert sql(database_url, "SELECT count(*) FROM helix.workers WHERE state = 'live'") == [
            (2,)
        ]

        sigkill(a)
        died = time.monotonic()
        wait_for(lambda: run_status(database_url, run_id) == "completed", timeout=60)
        took = time.monotonic() - died
        assert took < 4 * 3, f"recovered {took:.1f}s after the death, lease 4s"
        # helix's run row commits in the final write, DBOS's status just after it.
        wait_for(lambda: workflow_row(database_url, run_id) == ("SUCCESS", b_id), timeout=30)
        assert lines(tmp_path, "record_a.log") == ["one"]
        assert_transcript_is_clean(database_url, session_id, run_id)
        assert b.poll() is None, "the survivor was not fenced"
        assert sql(
            database_url,
            "SELECT state, recovered_by FROM helix.workers WHERE executor_id = %s",
            a_id,
        ) == [("dead", b_id)]
    finally:
        stop(a, b)


def test_no_session_lock_stays_behind_on_a_pooled_connection(pooled_url, database_url, tmp_path):
    """Starts hold the run's start lock in a transaction of its own behind a pooler: none
    is left on a server connection once the runs ended."""
    env = {**POOLED, "CRASH_APP_RUNS": "5", "CRASH_APP_CONCURRENT_STARTS": "1"}
    proc = spawn("run", pooled_url, "-", "commit", tmp_path, env=env)
    assert [r["status"] for r in _results(proc, 5)] == ["completed"] * 5
    with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
        held = conn.execute(
            "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
            "WHERE l.locktype = 'advisory' AND d.datname = current_database()"
        ).fetchone()
    assert held == (0,)


def _doctor_pooler(env: dict[str, str]) -> dict:
    done = forkserver.run(
        [sys.executable, "-m", "helix_dbos.cli", "doctor", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("HELIX_")} | env,
    )
    [check] = [c for c in json.loads(done.stdout) if c["name"] == "pooler"]
    return check


def test_doctor_says_whether_helix_is_set_up_for_the_pooler(pooled_url, database_url):
    unannounced = _doctor_pooler({"HELIX_DATABASE_URL": pooled_url})
    assert unannounced["level"] == "fail" and "PgBouncer" in unannounced["found"]
    assert "HELIX_DB_POOLER=transaction" in unannounced["fix"]
    set_up = _doctor_pooler(
        {
            "HELIX_DATABASE_URL": pooled_url,
            "HELIX_DB_POOLER": "transaction",
            "HELIX_LISTEN_DATABASE_URL": database_url,
        }
    )
    assert set_up["level"] == "ok", set_up
    assert "PgBouncer" in set_up["found"] and "direct listen URL" in set_up["found"]
    assert _doctor_pooler({"HELIX_DATABASE_URL": database_url})["level"] == "ok"


def test_double_texting_survives_a_kill_through_the_pooler(
    pooled_url, tmp_path, monkeypatch: pytest.MonkeyPatch
):
    """tests/test_double_texting_crash.py's kill with two messages stored, on the pooler."""
    monkeypatch.setenv("HELIX_DB_POOLER", "transaction")
    test_double_texting_crash.test_kill_mid_run_with_two_messages_stored(pooled_url, tmp_path)


def test_a_model_limit_holds_across_two_workers_through_the_pooler(
    pooled_url, tmp_path, monkeypatch: pytest.MonkeyPatch
):
    """tests/test_limits.py's limit of two concurrent calls, on the pooler."""
    monkeypatch.setenv("HELIX_DB_POOLER", "transaction")
    test_limits.test_a_limit_of_two_concurrent_calls_holds_across_two_workers(pooled_url, tmp_path)


@pytest.mark.faults
def test_a_database_restart_behind_the_pooler_loses_nothing(tmp_path):
    """A cluster of the test's own restarts behind the pooler while a tool runs: the run
    goes on through the pooler (which reconnects to the server) and completes once."""
    cluster = Cluster(tmp_path / "pg")
    cluster.start()
    bouncer = PgBouncer(tmp_path / "pgbouncer", cluster.url)
    markers = tmp_path / "markers"
    markers.mkdir()
    url = bouncer.url(cluster.url)
    try:
        proc = spawn("run", url, "-", "restart", markers, env=POOLED)
        first = started(proc)
        wait_for(lambda: (markers / "in_slow_b").exists())
        booted = sql(cluster.url, "SELECT pg_postmaster_start_time()")
        cluster.restart()
        assert sql(cluster.url, "SELECT pg_postmaster_start_time()") != booted
        (markers / "release").touch()
        out, _ = proc.communicate(timeout=120)
        outcome = json.loads(out.strip().splitlines()[-1])
        assert outcome["status"] == "completed", outcome
        assert lines(markers, "record_a.log") == ["one"] and lines(markers, "slow_b.log") == ["two"]
        assert_transcript_is_clean(cluster.url, first["session_id"], first["run_id"])
    finally:
        bouncer.stop()
        cluster.destroy()
