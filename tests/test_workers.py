"""Many workers on one database: real processes (tests/crash_app.py), SIGKILL and SIGSTOP.

Each worker holds a lease in helix.workers (4 s in crash_app); a live worker claims a
lapsed one and hands its runs back to the queues, and a worker that could not renew its
lease stops executing before anyone may claim it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from helpers import sql
from test_crash import APP, assert_transcript_is_clean, lines, sigkill, spawn, wait_for

from helix_dbos.store.database import libpq_url

pytestmark = pytest.mark.crash


def executor_of(database_url: str, proc: subprocess.Popen) -> str:
    rows: list = []

    def registered() -> bool:
        rows[:] = sql(
            database_url,
            "SELECT executor_id FROM helix.workers WHERE pid = %s AND state = 'live'",
            proc.pid,
        )
        return len(rows) == 1

    wait_for(registered)
    return rows[0][0]


def run_status(database_url: str, run_id: str) -> str:
    return sql(database_url, "SELECT status FROM helix.runs WHERE run_id = %s", run_id)[0][0]


def workflow_row(database_url: str, run_id: str) -> tuple:
    return sql(
        database_url,
        "SELECT status, executor_id FROM dbos.workflow_status WHERE workflow_uuid = %s",
        f"helix-{run_id}",
    )[0]


def started(proc: subprocess.Popen) -> dict:
    assert proc.stdout is not None
    return json.loads(proc.stdout.readline())


def approve(database_url: str, run_id: str, tool_call_id: str) -> None:
    script = (
        "import sys; from dbos import DBOSClient\n"
        "c = DBOSClient(system_database_url=sys.argv[1])\n"
        "c.send(sys.argv[2], {'tool_call_id': sys.argv[3], 'approved': True}, 'helix.approval')\n"
        "c.destroy()\n"
    )
    sender = subprocess.run(
        [sys.executable, "-c", script, libpq_url(database_url), f"helix-{run_id}", tool_call_id],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert sender.returncode == 0, sender.stderr


def test_two_processes_with_default_settings_never_touch_each_others_runs(database_url, tmp_path):
    a_marks, b_marks = tmp_path / "a", tmp_path / "b"
    a_marks.mkdir()
    b_marks.mkdir()
    a = spawn("start", database_url, "-", "approval", a_marks)
    b = None
    try:
        run_id = started(a)["run_id"]
        wait_for(lambda: run_status(database_url, run_id) == "waiting")
        a_id = executor_of(database_url, a)

        b = spawn("serve", database_url, "-", "approval", b_marks)
        b_id = started(b)["ready"]
        assert b_id != a_id, "each process gets its own executor id"
        time.sleep(3)  # B's startup, heartbeats and recovery sweeps

        assert workflow_row(database_url, run_id) == ("PENDING", a_id), "B took nothing of A's"
        assert run_status(database_url, run_id) == "waiting"
        live = sql(database_url, "SELECT count(*) FROM helix.workers WHERE state = 'live'")
        assert live[0][0] >= 2

        approve(database_url, run_id, "g1")
        wait_for(lambda: run_status(database_url, run_id) == "completed")
        assert lines(a_marks, "guarded_delete.log") == ["/data/old"], "A ran its own tool"
        assert lines(b_marks, "guarded_delete.log") == []
    finally:
        for proc in (a, b):
            if proc is not None:
                proc.kill()
                proc.wait(timeout=30)


def test_a_second_live_process_under_the_same_executor_id_is_refused(database_url, tmp_path):
    executor = f"dup-{os.getpid()}-{time.monotonic_ns()}"
    a = spawn("serve", database_url, executor, "tool", tmp_path)
    try:
        assert started(a)["ready"] == executor
        b = subprocess.run(
            [sys.executable, str(APP), "serve", database_url, executor, "tool", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert b.returncode != 0
        assert f"Executor id '{executor}' is in use by a live worker" in b.stderr
        assert a.poll() is None, "the first process is untouched"
        assert sql(
            database_url, "SELECT pid, state FROM helix.workers WHERE executor_id = %s", executor
        ) == [(a.pid, "live")]
    finally:
        a.kill()
        a.wait(timeout=30)


def test_runs_of_a_worker_killed_for_good_complete_on_a_survivor(database_url, tmp_path):
    a = spawn("start", database_url, "-", "tool", tmp_path)
    b = None
    try:
        first = started(a)
        run_id, session_id = first["run_id"], first["session_id"]
        a_id = executor_of(database_url, a)
        b = spawn("serve", database_url, "-", "tool", tmp_path)
        b_id = started(b)["ready"]
        wait_for(lambda: (tmp_path / "in_slow_b").exists())

        sigkill(a)
        died = time.monotonic()
        wait_for(lambda: run_status(database_url, run_id) == "completed", timeout=60)
        took = time.monotonic() - died

        assert took < 4 * 3, f"recovered {took:.1f}s after the death, lease 4s"
        wait_for(lambda: workflow_row(database_url, run_id) == ("SUCCESS", b_id))
        assert lines(tmp_path, "record_a.log") == ["one"], "a completed tool step is not re-run"
        assert lines(tmp_path, "slow_b.log") == ["two", "two"], "the interrupted call runs again"
        assert_transcript_is_clean(database_url, session_id, run_id)
        assert sql(
            database_url,
            "SELECT state, recovered_by, recovered_runs FROM helix.workers WHERE executor_id = %s",
            a_id,
        ) == [("dead", b_id, 1)]
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)


def test_a_stalled_worker_fences_itself_and_its_run_completes_once_elsewhere(
    database_url, tmp_path
):
    """SIGSTOP past the lease: a survivor takes the run; on SIGCONT the stalled worker
    finds its lease lapsed and exits (code 75) without executing another step."""
    a = spawn("start", database_url, "-", "tool", tmp_path)
    b = None
    try:
        first = started(a)
        run_id, session_id = first["run_id"], first["session_id"]
        b = spawn("serve", database_url, "-", "tool", tmp_path)
        b_id = started(b)["ready"]
        wait_for(lambda: (tmp_path / "in_slow_b").exists())

        os.kill(a.pid, signal.SIGSTOP)
        wait_for(lambda: run_status(database_url, run_id) == "completed", timeout=60)
        os.kill(a.pid, signal.SIGCONT)
        assert a.wait(timeout=30) == 75, "the stalled worker fenced itself"

        wait_for(lambda: workflow_row(database_url, run_id) == ("SUCCESS", b_id))
        assert lines(tmp_path, "record_a.log") == ["one"]
        assert lines(tmp_path, "slow_b.log") == ["two", "two"]
        assert len(lines(tmp_path, "llm.log")) == 3, "no LLM call ran twice"
        assert_transcript_is_clean(database_url, session_id, run_id)
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
                proc.wait(timeout=30)
