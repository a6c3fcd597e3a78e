"""Double texting survives SIGKILL (issue 31): a real process is killed between storing
a message and its run, mid-run with messages waiting, and during a rollback; the
relaunched process runs every message exactly once, in order, and loses nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import forkserver
import pytest
from helpers import lines, sql

APP = Path(__file__).parent / "apps" / "double_texting_crash_app.py"
pytestmark = pytest.mark.crash
POOLER_ENV = ("HELIX_DB_POOLER", "HELIX_LISTEN_DATABASE_URL")


def spawn(mode: str, database_url: str, executor: str, scenario: str, markers: Path, *extra: str):
    stderr = open(markers / f"stderr-{mode}-{time.monotonic_ns()}.log", "w")  # noqa: SIM115
    return forkserver.Popen(
        [sys.executable, str(APP), mode, database_url, executor, scenario, str(markers), *extra],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        # Nothing of the test's own settings, but a pooler's (tests/test_pooler.py).
        env={k: v for k, v in os.environ.items() if not k.startswith("HELIX_") or k in POOLER_ENV},
    )


def first_life(database_url: str, scenario: str, markers: Path, *, killed_by_itself: bool):
    executor = f"dt-{scenario}-{uuid.uuid4().hex[:8]}"
    proc = spawn("start", database_url, executor, scenario, markers)
    if killed_by_itself:
        proc.wait(timeout=60)
    else:
        assert proc.stdout is not None
        sent = json.loads(proc.stdout.readline())
        assert len(sent["messages"]) == 2
        proc.kill()
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, [p.read_text() for p in markers.glob("stderr-*")]
    ids = json.loads(lines(markers, "ids")[0])
    return executor, ids["session_id"], ids["run_id"]


def second_life(database_url: str, executor: str, scenario: str, markers: Path, sid, rid) -> dict:
    proc = spawn("recover", database_url, executor, scenario, markers, sid, rid)
    out, _ = proc.communicate(timeout=180)
    stderr = [p.read_text()[-3000:] for p in markers.glob("stderr-recover-*")]
    assert proc.returncode == 0, (out, stderr)
    return json.loads(out.strip().splitlines()[-1])


def runs_by_turn(database_url: str, session_id: str) -> list[tuple]:
    return sql(
        database_url,
        "SELECT r.turn, r.status, (SELECT content FROM helix.messages m WHERE m.run_id = r.run_id "
        "AND m.role = 'user' ORDER BY seq LIMIT 1) FROM helix.runs r WHERE r.session_id = %s "
        "ORDER BY r.turn",
        session_id,
    )


def assert_clean(database_url: str, session_id: str) -> list[tuple]:
    rows = sql(
        database_url,
        "SELECT seq, role, content, tool_calls, tool_call_id FROM helix.messages "
        "WHERE session_id = %s ORDER BY seq",
        session_id,
    )
    calls = [c["id"] for r in rows if r[3] for c in r[3]]
    results = [r[4] for r in rows if r[1] == "tool"]
    assert sorted(calls) == sorted(results) and len(results) == len(set(results))
    usage = sql(database_url, "SELECT usage_id FROM helix.usage WHERE session_id = %s", session_id)
    assert len(usage) == len(set(usage))
    return rows


def test_kill_mid_run_with_two_messages_stored(database_url, tmp_path):
    executor, sid, rid = first_life(database_url, "stored", tmp_path, killed_by_itself=False)
    waiting = sql(
        database_url,
        "SELECT content, status FROM helix.queued_messages WHERE session_id = %s ORDER BY seq",
        sid,
    )
    assert waiting == [("second", "queued"), ("third", "queued")]

    outcome = second_life(database_url, executor, "stored", tmp_path, sid, rid)

    assert outcome == {"first": "completed", "second": "completed", "third": "completed"}
    assert runs_by_turn(database_url, sid) == [
        (1, "completed", "first"),
        (2, "completed", "second"),
        (3, "completed", "third"),
    ]
    assert [c for c in lines(tmp_path, "llm.log") if c != "first"] == ["second", "third"]
    started = sql(
        database_url,
        "SELECT count(*), count(DISTINCT run_id) FROM helix.queued_messages "
        "WHERE session_id = %s AND status = 'started'",
        sid,
    )
    assert started == [(2, 2)]
    assert_clean(database_url, sid)


def test_kill_between_opening_a_messages_run_and_starting_it(database_url, tmp_path):
    executor, sid, rid = first_life(database_url, "opening", tmp_path, killed_by_itself=True)
    assert lines(tmp_path, "opened_queued_run") == ["x"]
    opened = sql(
        database_url,
        "SELECT q.status, r.status FROM helix.queued_messages q JOIN helix.runs r "
        "ON r.run_id = q.run_id WHERE q.session_id = %s",
        sid,
    )
    assert opened == [("started", "running")], "its run was opened, not started"

    outcome = second_life(database_url, executor, "opening", tmp_path, sid, rid)

    assert outcome == {"first": "completed", "second": "completed"}
    assert runs_by_turn(database_url, sid) == [
        (1, "completed", "first"),
        (2, "completed", "second"),
    ]
    assert lines(tmp_path, "llm.log").count("second") == 1, "the message ran once"
    assert lines(tmp_path, "pause.log") == ["x"], "the first run's tool is not run again"
    assert_clean(database_url, sid)


def test_kill_during_a_rollback(database_url, tmp_path):
    executor, sid, rid = first_life(database_url, "rollback", tmp_path, killed_by_itself=True)
    assert lines(tmp_path, "in_rollback") == ["x"]
    state = sql(database_url, "SELECT state FROM helix.sessions WHERE session_id = %s", sid)
    assert state[0][0].get("bumped") is True, "the aborted run's state change is still there"
    assert sql(database_url, "SELECT status FROM helix.runs WHERE run_id = %s", rid) == [
        ("aborted",)
    ]

    outcome = second_life(database_url, executor, "rollback", tmp_path, sid, rid)

    assert outcome == {"first": "aborted", "second": "completed"}
    rows = assert_clean(database_url, sid)
    assert [(r[1], r[2]) for r in rows] == [("user", "second"), ("assistant", "re: second")]
    assert sql(database_url, "SELECT state FROM helix.sessions WHERE session_id = %s", sid) == [
        ({},)
    ]
    assert sql(
        database_url, "SELECT rolled_back_at IS NOT NULL FROM helix.runs WHERE run_id = %s", rid
    ) == [(True,)]
    assert sql(
        database_url,
        "SELECT count(*) > 0 FROM helix.rolled_back_messages WHERE run_id = %s AND role = 'user'",
        rid,
    ) == [(True,)]
    assert lines(tmp_path, "llm.log").count("second") == 1
