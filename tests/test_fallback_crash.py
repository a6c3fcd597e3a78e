"""A fallback model's answer survives a SIGKILL: the relaunch asks no model again for it.

The primary is down (529 on every call), the fallback answered step 1 with a tool call,
and the process died in that tool, before step 2. On relaunch the LLM step replays its
checkpoint: the fallback's answer, never a new call to either model.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import forkserver
import pytest
from helpers import lines, sql

APP = Path(__file__).parent / "apps" / "fallback_crash_app.py"
pytestmark = pytest.mark.crash


def spawn(*args: str, markers: Path) -> subprocess.Popen:
    stderr = open(markers / f"stderr-{args[0]}-{time.monotonic_ns()}.log", "w")  # noqa: SIM115
    return forkserver.Popen(
        [sys.executable, str(APP), *args], stdout=subprocess.PIPE, stderr=stderr, text=True
    )


def test_a_kill_after_the_fallback_answered_keeps_its_answer(database_url, tmp_path):
    executor = f"fallback-{uuid.uuid4().hex[:8]}"
    proc = spawn("start", database_url, executor, str(tmp_path), markers=tmp_path)
    assert proc.stdout is not None
    started = json.loads(proc.stdout.readline())
    proc.wait(timeout=120)
    assert proc.returncode == -signal.SIGKILL, "the tool killed its process"
    assert lines(tmp_path, "primary.log") == ["x"]
    assert lines(tmp_path, "fallback.log") == ["tool"]

    recover = spawn(
        "recover", database_url, executor, str(tmp_path), started["run_id"], markers=tmp_path
    )
    out, _ = recover.communicate(timeout=180)
    assert recover.returncode == 0, out
    outcome = json.loads(out.strip().splitlines()[-1])

    assert outcome["status"] == "completed" and outcome["output"] == "Sunny for 3 days.", outcome
    # step 1 is replayed from its checkpoint; only step 2 calls the models
    assert lines(tmp_path, "fallback.log") == ["tool", "text"]
    assert lines(tmp_path, "primary.log") == ["x", "x"]
    assert lines(tmp_path, "tool.log") == ["Paris", "Paris"], "the killed tool runs again"
    messages = sql(
        database_url,
        "SELECT role, tool_calls FROM helix.messages WHERE session_id = %s ORDER BY seq",
        started["session_id"],
    )
    assert [m[0] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[1][1][0]["name"] == "get_weather"
    usage = sql(
        database_url,
        "SELECT step, model, success FROM helix.usage WHERE run_id = %s AND kind = 'llm' "
        "ORDER BY step",
        started["run_id"],
    )
    assert usage == [(1, "gpt-4o-2024-08-06", True), (2, "gpt-4o", True)]
