"""Crash safety of sub-agents: SIGKILL a real process while two children are mid-run
and their parent waits for them, relaunch it, and check every row (issue 13)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from helpers import sql

APP = Path(__file__).with_name("subagent_crash_app.py")
pytestmark = pytest.mark.crash


def spawn(mode: str, database_url: str, executor: str, markers: Path, *extra: str):
    return subprocess.Popen(
        [sys.executable, str(APP), mode, database_url, executor, str(markers), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def wait_for(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def lines(markers: Path, name: str) -> list[str]:
    path = markers / name
    return path.read_text().splitlines() if path.exists() else []


def test_kill_while_two_children_are_mid_run_and_their_parent_waits(database_url, tmp_path):
    executor = f"subagent-crash-{uuid.uuid4().hex[:8]}"
    proc = spawn("start", database_url, executor, tmp_path)
    assert proc.stdout is not None
    started = json.loads(proc.stdout.readline())
    run_id, session_id = started["run_id"], started["session_id"]
    wait_for(lambda: (tmp_path / "in_slow_owls").exists() and (tmp_path / "in_slow_bats").exists())
    [(status, waiting_for)] = sql(
        database_url, "SELECT status, waiting_for FROM helix.runs WHERE run_id = %s", run_id
    )
    assert (status, waiting_for) == ("waiting", "awaiting_children")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)

    relaunched = spawn("recover", database_url, executor, tmp_path, run_id)
    out, _ = relaunched.communicate(timeout=150)
    assert relaunched.returncode == 0, out
    outcome = json.loads(out.strip().splitlines()[-1])

    assert outcome["status"] == "completed", outcome
    assert outcome["output"] == "owls: read about owls | bats: read about bats"
    for topic in ("owls", "bats"):
        assert lines(tmp_path, f"note_{topic}.log") == ["x"], "a completed tool is not run again"
        assert len(lines(tmp_path, f"slow_{topic}.log")) == 2, "the call in flight runs again"
    # Each child continued from its own last step: 2 model calls before the kill, 1 after.
    assert len(lines(tmp_path, "llm_researcher.log")) == 6
    assert len(lines(tmp_path, "llm_lead.log")) == 2
    # Exactly one child session per call, each completed, each with one run.
    children = sql(
        database_url,
        "SELECT s.session_id, s.status, s.root_session_id, count(r.run_id) FROM helix.sessions s "
        "JOIN helix.runs r ON r.session_id = s.session_id WHERE s.parent_session_id = %s "
        "GROUP BY s.session_id, s.status, s.root_session_id",
        session_id,
    )
    assert len(children) == 2
    assert {(c[1], c[2], c[3]) for c in children} == {("completed", session_id, 1)}
    # The parent received exactly one result per child, and has no unanswered call.
    results = sql(
        database_url,
        "SELECT tool_call_id, content FROM helix.messages WHERE session_id = %s AND role = 'tool' "
        "ORDER BY tool_call_id",
        session_id,
    )
    assert results == [("r1", "owls: read about owls"), ("r2", "bats: read about bats")]
    # One `subagent` usage row per child, none duplicated, with the child's tokens.
    rows = sql(
        database_url,
        "SELECT tool_name, input_tokens, success FROM helix.usage WHERE run_id = %s "
        "AND kind = 'subagent'",
        run_id,
    )
    assert len(rows) == 2 and all(r[0] == "subagent__researcher" and r[2] for r in rows)
    [(child_tokens,)] = sql(
        database_url,
        "SELECT sum(input_tokens) FROM helix.usage WHERE session_id IN "
        "(SELECT session_id FROM helix.sessions WHERE parent_session_id = %s)",
        session_id,
    )
    assert sum(r[1] for r in rows) == child_tokens
    for child_session, *_ in children:
        usage = sql(
            database_url,
            "SELECT kind, count(*) FROM helix.usage WHERE session_id = %s GROUP BY kind "
            "ORDER BY kind",
            child_session,
        )
        assert usage == [("llm", 3), ("tool", 2)], "no duplicate usage row in a child"
