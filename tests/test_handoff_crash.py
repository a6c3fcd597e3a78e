"""A SIGKILL at the worst moments of a handoff leaves exactly one handoff.

`tool`: the process dies in a tool of the step that hands off (the reply is checkpointed,
the handoff row not yet written). `target`: it dies in the target's first model call (the
handoff row is written, the target's first step is not checkpointed). Either way the
relaunched run writes one handoff row, the target answers once, and no message is doubled.
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

APP = Path(__file__).parent / "apps" / "handoff_crash_app.py"
pytestmark = pytest.mark.crash


def spawn(*args: str, markers: Path) -> subprocess.Popen:
    stderr = open(markers / f"stderr-{args[0]}-{time.monotonic_ns()}.log", "w")  # noqa: SIM115
    return forkserver.Popen(
        [sys.executable, str(APP), *args], stdout=subprocess.PIPE, stderr=stderr, text=True
    )


@pytest.mark.parametrize("kill_at", ["tool", "target"])
def test_a_kill_around_a_handoff_leaves_one_handoff(database_url, tmp_path, kill_at):
    executor = f"handoff-{uuid.uuid4().hex[:8]}"
    common = (database_url, executor, str(tmp_path), kill_at)
    proc = spawn("start", *common, markers=tmp_path)
    assert proc.stdout is not None
    started = json.loads(proc.stdout.readline())
    proc.wait(timeout=120)
    assert proc.returncode == -signal.SIGKILL
    before = sql(
        database_url, "SELECT count(*) FROM helix.handoffs WHERE run_id = %s", started["run_id"]
    )
    assert before == [(1 if kill_at == "target" else 0,)]

    recover = spawn("recover", *common, started["run_id"], markers=tmp_path)
    out, _ = recover.communicate(timeout=180)
    assert recover.returncode == 0, out
    outcome = json.loads(out.strip().splitlines()[-1])

    assert outcome == {
        "status": "completed",
        "output": "You owe 10 EUR.",
        "error": None,
        "current_agent": "handoff_billing",
    }
    # Triage's reply is replayed from its checkpoint; billing is asked until it answers.
    billing_calls = ["handoff_billing"] * (2 if kill_at == "target" else 1)
    assert lines(tmp_path, "llm.log") == ["handoff_triage", *billing_calls]
    assert lines(tmp_path, "tool.log") == (["42", "42"] if kill_at == "tool" else ["42"])
    rows = sql(
        database_url,
        "SELECT step, tool_call_id, from_agent, to_agent FROM helix.handoffs WHERE run_id = %s",
        started["run_id"],
    )
    assert rows == [(1, "hand", "handoff_triage", "handoff_billing")]
    messages = sql(
        database_url,
        "SELECT role, content, tool_call_id FROM helix.messages WHERE session_id = %s ORDER BY seq",
        started["session_id"],
    )
    assert messages == [
        ("user", "What do I owe?", None),
        ("assistant", None, None),
        ("tool", "order 42: unpaid", "look"),
        ("tool", "Transferred to handoff_billing", "hand"),
        ("assistant", "You owe 10 EUR.", None),
    ]
    usage = sql(
        database_url,
        "SELECT step, kind FROM helix.usage WHERE run_id = %s ORDER BY step, kind",
        started["run_id"],
    )
    assert usage == [(1, "llm"), (1, "tool"), (2, "llm")]
