"""One trace per session across processes: SIGKILL a traced run mid-tool, relaunch it
in a new process, and find every span of both processes in the session's trace, under
the run's one `invoke_agent` span."""

from __future__ import annotations

import json

import pytest
from helpers import lines, wait_for
from test_crash import sigkill, spawn

pytest.importorskip("opentelemetry.sdk")

from helix_dbos.otel import run_span_id, session_trace_id

pytestmark = pytest.mark.crash
OTEL = {"CRASH_APP_OTEL": "1"}


def test_a_recovered_run_s_spans_from_both_processes_are_one_trace(database_url, tmp_path):
    executor = "crash-otel-" + tmp_path.name[-8:]
    proc = spawn("start", database_url, executor, "tool", tmp_path, env=OTEL)
    assert proc.stdout is not None
    started = json.loads(proc.stdout.readline())
    wait_for(lambda: (tmp_path / "in_slow_b").exists())
    sigkill(proc)
    relaunched = spawn(
        "recover", database_url, executor, "tool", tmp_path, started["run_id"], env=OTEL
    )
    out, _ = relaunched.communicate(timeout=120)
    assert relaunched.returncode == 0, out
    assert json.loads(out.strip().splitlines()[-1])["status"] == "completed"

    spans = [json.loads(line) for line in lines(tmp_path, "spans.log")]
    assert len({s["pid"] for s in spans}) == 2, "spans from the killed and the relaunched process"
    assert {s["trace"] for s in spans} == {session_trace_id(started["session_id"])}
    [run] = [s for s in spans if s["name"].startswith("invoke_agent")]
    assert run["span"] == run_span_id(started["run_id"]) and run["parent"] is None
    children = [s for s in spans if s is not run]
    assert {s["parent"] for s in children} == {run["span"]}
    names = [s["name"] for s in children]
    assert names.count("chat mock") == 3, "one per LLM call, none repeated by the recovery"
    assert names.count("execute_tool record_a") == 1, "a completed tool step is not traced twice"
    assert names.count("execute_tool slow_b") == 1, "the killed call ends only in the relaunch"
