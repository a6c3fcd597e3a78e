"""Crash safety of sub-agents: SIGKILL a real process while two children are mid-run
and their parent waits for them, relaunch it, and check every row (issue 13)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import forkserver
import pytest
from helpers import lines, sql, wait_for

APP = Path(__file__).parent / "apps" / "subagent_crash_app.py"
pytestmark = pytest.mark.crash


def spawn(mode: str, database_url: str, executor: str, markers: Path, scenario: str, *extra: str):
    return forkserver.Popen(
        [sys.executable, str(APP), mode, database_url, executor, str(markers), scenario, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def test_kill_while_two_children_are_mid_run_and_their_parent_waits(database_url, tmp_path):
    executor = f"subagent-crash-{uuid.uuid4().hex[:8]}"
    proc = spawn("start", database_url, executor, tmp_path, "children")
    assert proc.stdout is not None
    started = json.loads(proc.stdout.readline())
    run_id, session_id = started["run_id"], started["session_id"]
    wait_for(lambda: (tmp_path / "in_slow_owls").exists() and (tmp_path / "in_slow_bats").exists())
    [(status, waiting_for)] = sql(
        database_url, "SELECT status, waiting_for FROM helix.runs WHERE run_id = %s", run_id
    )
    assert (status, waiting_for) == ("waiting", "awaiting_children")
    proc.kill()
    proc.wait(timeout=30)

    relaunched = spawn("recover", database_url, executor, tmp_path, "children", run_id)
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
    assert results[1:] == [("r1", "owls: read about owls"), ("r2", "bats: read about bats")]
    assert results[0][0] == "r0" and "could not be dispatched" in results[0][1]
    # The dispatch failure was logged once, not again by the replay after the relaunch;
    # each call fired before_tool, on_message and after_tool once, across the crash.
    assert lines(tmp_path, "dispatch_failed.log") == ["r0"]
    for call_id, success in (("r0", "False"), ("r1", "True"), ("r2", "True")):
        assert lines(tmp_path, f"before_tool_{call_id}.log") == ["x"], call_id
        assert lines(tmp_path, f"on_message_{call_id}.log") == ["x"], call_id
        assert lines(tmp_path, f"after_tool_{call_id}.log") == [success], call_id
    # One `subagent` usage row per child, none duplicated, with the child's tokens.
    rows = sql(
        database_url,
        "SELECT tool_name, input_tokens, success FROM helix.usage WHERE run_id = %s "
        "AND kind = 'subagent' AND tool_name = 'subagent__researcher'",
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


def test_kill_while_a_companion_receives_a_message(database_url, tmp_path):
    """The lead has sent its running critic a message (an interrupt) and waits for it to
    stop; the critic is inside its slow tool. After the relaunch the critic stops, gets
    exactly one new turn with the message, and the lead hears of its end exactly once."""
    executor = f"companion-crash-{uuid.uuid4().hex[:8]}"
    proc = spawn("start", database_url, executor, tmp_path, "companion")
    assert proc.stdout is not None
    started = json.loads(proc.stdout.readline())
    run_id, session_id = started["run_id"], started["session_id"]
    critic_session = f"{session_id}-agent-c"

    def interrupt_sent() -> bool:
        rows = sql(
            database_url,
            "SELECT count(*) FROM dbos.notifications n JOIN helix.runs r "
            "ON r.workflow_id = n.destination_uuid WHERE r.session_id = %s "
            "AND n.topic = 'helix.interrupt'",
            critic_session,
        )
        return (tmp_path / "in_slow_v1").exists() and rows[0][0] == 1

    wait_for(interrupt_sent)
    proc.kill()
    proc.wait(timeout=30)

    relaunched = spawn("recover", database_url, executor, tmp_path, "companion", run_id)
    out, _ = relaunched.communicate(timeout=150)
    assert relaunched.returncode == 0, out
    outcome = json.loads(out.strip().splitlines()[-1])

    assert outcome["status"] == "completed", outcome
    assert outcome["output"] == "[companion 'c' (critic) completed with: approved v2]"
    runs = sql(
        database_url,
        "SELECT turn, status FROM helix.runs WHERE session_id = %s ORDER BY turn",
        critic_session,
    )
    assert runs == [(1, "interrupted"), (2, "completed")], "one new turn, not two"
    messages = sql(
        database_url,
        "SELECT role, content FROM helix.messages WHERE session_id = %s AND role = 'user'",
        critic_session,
    )
    assert messages == [("user", "v1"), ("user", "v2")]
    assert len(lines(tmp_path, "slow_v1.log")) == 2, "the call in flight runs again"
    # The critic's model: one call in turn 1 (the interrupt stops it before a second), one in 2.
    assert len(lines(tmp_path, "llm_critic.log")) == 2
    notices = sql(
        database_url,
        "SELECT count(*) FROM helix.messages WHERE session_id = %s AND role = 'user' "
        "AND content LIKE '[companion%%'",
        session_id,
    )
    assert notices == [(1,)]
    results = sql(
        database_url,
        "SELECT tool_call_id FROM helix.messages WHERE session_id = %s AND role = 'tool' "
        "ORDER BY seq",
        session_id,
    )
    assert results == [("c1",), ("c2",), ("w",)]


def test_a_companion_dispatch_failure_is_logged_once_across_a_recovery(database_url, tmp_path):
    """The lead spawned an unregistered companion (a dispatch failure: tool error, error
    chunk, ERROR event), then was killed in its next tool. The relaunch replays the
    spawn from its checkpoint: the same tool error, the same one chunk, no second event."""
    executor = f"ghost-crash-{uuid.uuid4().hex[:8]}"
    proc = spawn("start", database_url, executor, tmp_path, "companion_ghost")
    assert proc.stdout is not None
    started = json.loads(proc.stdout.readline())
    run_id, session_id = started["run_id"], started["session_id"]
    wait_for(lambda: (tmp_path / "in_slow_lead").exists())
    proc.kill()
    proc.wait(timeout=30)

    relaunched = spawn("recover", database_url, executor, tmp_path, "companion_ghost", run_id)
    out, _ = relaunched.communicate(timeout=150)
    assert relaunched.returncode == 0, out
    outcome = json.loads(out.strip().splitlines()[-1])

    assert outcome["status"] == "completed", outcome
    assert outcome["output"].startswith("Sub-agent 'ghost' could not be dispatched")
    assert lines(tmp_path, "dispatch_failed.log") == ["g0"]
    chunks = sql(
        database_url,
        "SELECT payload->>'tool_call_id' FROM helix.stream_events "
        "WHERE session_id = %s AND type = 'error'",
        session_id,
    )
    assert chunks == [("g0",)]
    assert len(lines(tmp_path, "slow_lead.log")) == 2, "the call in flight runs again"
