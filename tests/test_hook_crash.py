"""Hooks across a crash: SIGKILL mid-tool, relaunch, and count every hook firing.

Hooks fire inside the steps that exist anyway, so a step that completed before the
kill never fires its hooks again; only the interrupted tool step, which runs again,
fires its before_tool twice. State changed by hooks is committed exactly once.
"""

from __future__ import annotations

import json

import pytest
from helpers import lines, sql, wait_for
from test_crash import sigkill, spawn

pytestmark = pytest.mark.crash
HOOKS = {"CRASH_APP_HOOKS": "1"}


def test_hooks_fire_once_per_completed_step_across_a_crash(database_url, tmp_path):
    executor = "crash-hooks-" + tmp_path.name[-8:]
    proc = spawn("start", database_url, executor, "tool", tmp_path, env=HOOKS)
    assert proc.stdout is not None
    started = json.loads(proc.stdout.readline())
    wait_for(lambda: (tmp_path / "in_slow_b").exists())
    sigkill(proc)
    before_kill = lines(tmp_path, "hooks.log")
    assert before_kill[-1] == "before_tool:2:t2"

    relaunched = spawn(
        "recover", database_url, executor, "tool", tmp_path, started["run_id"], env=HOOKS
    )
    out, _ = relaunched.communicate(timeout=120)
    assert relaunched.returncode == 0, out
    assert json.loads(out.strip().splitlines()[-1])["status"] == "completed"

    fired = lines(tmp_path, "hooks.log")
    # The relaunched process exits once the run's status is final: its on_agent_complete
    # step may not have run yet (a later recovery fires it), but never twice.
    if fired[-1] == "on_agent_complete:3:":
        fired = fired[:-1]
    assert fired == [
        "on_agent_start:1:",
        "before_llm_call:1:",
        "after_llm_call:1:",
        "on_message:1:assistant",
        "before_tool:1:t1",
        "on_message:1:tool",
        "after_tool:1:t1",
        "before_llm_call:2:",
        "after_llm_call:2:",
        "on_message:2:assistant",
        "before_tool:2:t2",  # killed here: the step had not completed ...
        "before_tool:2:t2",  # ... so it runs again after the relaunch, hooks and all
        "on_message:2:tool",
        "after_tool:2:t2",
        "before_llm_call:3:",
        "after_llm_call:3:",
        "on_message:3:assistant",
        "on_message:3:tool",  # __finish__'s result, written with the run's end
    ]
    state = sql(
        database_url,
        "SELECT state FROM helix.sessions WHERE session_id = %s",
        started["session_id"],
    )
    assert state == [({"after_tool": 2},)], "each after_tool's change committed once"
