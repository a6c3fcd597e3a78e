"""AG-UI (issue 33): helix's POST /ag-ui/{agent} driven by AG-UI's own client.

A real server process (tests/apps/ag_ui_app.py) and `@ag-ui/client`'s HttpAgent under Node
(tests/js/ag_ui/run.mjs, which prints what it received as JSON lines): a plain run, a
tool call, an approval round trip, a front-end tool, a reconnect mid-run and a SIGKILL of
the server mid-run. Input errors are checked with plain HTTP: they are JSON 4xx.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import _new_database
from helpers import skip_or_fail_in_ci, sql
from live_server import ServerProcess, answers

APP = Path(__file__).parent / "apps" / "ag_ui_app.py"
CLIENT_DIR = Path(__file__).parent / "js" / "ag_ui"
TOKEN = "ag-ui-secret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="session")
def node_client() -> Path:
    """tests/js/ag_ui with its node_modules (`npm ci` from the committed lock file)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        skip_or_fail_in_ci("node and npm are not installed")
    if not (CLIENT_DIR / "node_modules" / "@ag-ui" / "client").exists():
        subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"], cwd=CLIENT_DIR, check=True, timeout=600
        )
    return CLIENT_DIR


class Server(ServerProcess):
    """One server process on its database; `start(life)` again after `kill()`."""

    def __init__(self, database_url: str, markers: Path) -> None:
        super().__init__(markers / "server.out")
        self.database_url, self.markers = database_url, markers
        self.executor = f"ag-ui-{uuid.uuid4().hex[:8]}"

    def start(self, life: str = "first") -> Server:
        args = [sys.executable, str(APP), self.database_url, str(self.port), self.executor]
        self.launch([*args, str(self.markers), life], answers(f"{self.url}/openapi.json", AUTH))
        return self


@pytest.fixture
def server(
    embedded_dir: Path, migrated_template: str, tmp_path: Path, node_client: Path
) -> Iterator[Server]:
    """A server on a database of its own (a killed process leaves none of its runs to
    other tests)."""
    with _new_database(embedded_dir, migrated_template) as url:
        running = Server(url, tmp_path)
        try:
            yield running.start()
        finally:
            running.stop()


def plan(server: Server, *steps: dict[str, Any]) -> dict[str, Any]:
    return {
        "url": f"{server.url}/ag-ui/assistant",
        "token": TOKEN,
        "threadId": f"thread-{uuid.uuid4().hex[:12]}",
        "steps": list(steps),
    }


def client(args: dict[str, Any]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["node", "run.mjs", json.dumps(args)],
        cwd=CLIENT_DIR,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "SUPPRESS_TRANSFORMATION_WARNINGS": "true"},
    )


def received(proc: subprocess.Popen[str], timeout: float = 180) -> list[dict[str, Any]]:
    stdout, stderr = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, stderr
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def run_client(args: dict[str, Any]) -> list[dict[str, Any]]:
    return received(client(args))


def attempts(lines: list[dict[str, Any]], step: str) -> list[list[dict[str, Any]]]:
    """The events of each attempt of a step, in order."""
    runs: list[list[dict[str, Any]]] = []
    current: str | None = None
    for line in lines:
        if "attempt" in line:
            current = line["step"]
            if current == step:
                runs.append([])
        elif "event" in line and current == step:
            runs[-1].append(line["event"])
    return runs


def events(lines: list[dict[str, Any]], step: str) -> list[dict[str, Any]]:
    return attempts(lines, step)[-1]


def done(lines: list[dict[str, Any]], step: str) -> dict[str, Any]:
    [line] = [line for line in lines if line.get("done") == step]
    return line


def types(evs: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in evs]


def text(evs: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in evs if e["type"] == "TEXT_MESSAGE_CONTENT")


def runs(server: Server, thread: str) -> list[tuple[Any, ...]]:
    return sql(
        server.database_url,
        "SELECT run_id, status FROM helix.runs WHERE session_id = %s ORDER BY turn",
        thread,
    )


def marks(server: Server, name: str) -> list[str]:
    path = server.markers / name
    return path.read_text().splitlines() if path.exists() else []


def test_a_plain_run_streams_text_and_the_thread_keeps_its_history(server: Server) -> None:
    args = plan(server, {"runId": "r1", "message": "hello"}, {"runId": "r2", "message": "again"})
    lines = run_client(args)
    first = events(lines, "r1")
    assert types(first) == [
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STATE_SNAPSHOT",
        "RUN_FINISHED",
    ]
    assert first[0]["threadId"] == args["threadId"] and first[0]["runId"] == "r1"
    assert text(first) == "Hello from helix: hello"
    assert first[-1]["outcome"]["type"] == "success"
    assert text(events(lines, "r2")) == "Hello from helix: again"
    # The client's own view: its messages, as HttpAgent built them from the events.
    said = [m["content"] for m in done(lines, "r2")["messages"] if m["role"] == "assistant"]
    assert said == ["Hello from helix: hello", "Hello from helix: again"]
    # The thread is one helix session with one completed run per AG-UI run.
    assert [status for _, status in runs(server, args["threadId"])] == ["completed", "completed"]


def test_a_tool_call_streams_its_call_and_result(server: Server) -> None:
    args = plan(server, {"runId": "w1", "message": "weather in Paris"})
    lines = run_client(args)
    evs = events(lines, "w1")
    [start] = [e for e in evs if e["type"] == "TOOL_CALL_START"]
    assert start["toolCallName"] == "lookup"
    arguments = "".join(e["delta"] for e in evs if e["type"] == "TOOL_CALL_ARGS")
    assert json.loads(arguments) == {"city": "Paris"}
    [result] = [e for e in evs if e["type"] == "TOOL_CALL_RESULT"]
    assert result["toolCallId"] == start["toolCallId"]
    assert result["content"] == "sunny in Paris"
    assert text(evs) == "tool said: sunny in Paris"
    assert types(evs).index("TOOL_CALL_END") < types(evs).index("TOOL_CALL_RESULT")
    assert marks(server, "lookup.log") == ["Paris"]

    # Sent again with Last-Event-ID (the seq of the tool's result): the same run, after it.
    [(seq,)] = sql(
        server.database_url,
        "SELECT seq FROM helix.stream_events WHERE session_id = %s AND type = 'tool_end'",
        args["threadId"],
    )
    again = {**args, "steps": [{"runId": "w1", "headers": {"Last-Event-ID": str(seq)}}]}
    after = events(run_client(again), "w1")
    assert "TOOL_CALL_RESULT" not in types(after) and "TOOL_CALL_START" not in types(after)
    assert text(after) == "tool said: sunny in Paris"
    assert types(after)[0] == "RUN_STARTED" and types(after)[-1] == "RUN_FINISHED"
    assert marks(server, "lookup.log") == ["Paris"]  # no second run


def test_an_approval_ends_the_run_with_an_interrupt_and_resume_answers_it(
    server: Server,
) -> None:
    args = plan(
        server,
        {"runId": "p1", "message": "pay 5"},
        {"runId": "p2", "resume": [{"status": "resolved", "payload": {"approved": True}}]},
        {"runId": "p3", "message": "pay 7"},
        {"runId": "p4", "resume": [{"status": "cancelled"}]},
    )
    lines = run_client(args)
    asked = events(lines, "p1")
    assert types(asked)[-1] == "RUN_FINISHED"
    [interrupt] = asked[-1]["outcome"]["interrupts"]
    assert asked[-1]["outcome"]["type"] == "interrupt"
    assert interrupt["reason"] == "tool_approval"
    assert interrupt["toolCallId"] == interrupt["id"] == "call_transfer"
    assert "TOOL_CALL_START" in types(asked) and "TOOL_CALL_RESULT" not in types(asked)
    assert done(lines, "p1")["pending"] == ["call_transfer"]

    answered = events(lines, "p2")
    assert types(answered)[0] == "RUN_STARTED" and answered[0]["runId"] == "p2"
    assert "TOOL_CALL_START" not in types(answered)  # announced by the previous run
    [result] = [e for e in answered if e["type"] == "TOOL_CALL_RESULT"]
    assert result["content"] == "sent 5"
    assert text(answered) == "tool said: sent 5"
    assert answered[-1]["type"] == "RUN_FINISHED"
    assert answered[-1]["outcome"]["type"] == "success"

    rejected = events(lines, "p4")
    [result] = [e for e in rejected if e["type"] == "TOOL_CALL_RESULT"]
    assert "cancelled by the client" in result["content"]
    assert marks(server, "transfer.log") == ["5"]  # the rejected call never ran
    # Two AG-UI runs per helix run: the interrupted one and its continuation.
    assert [status for _, status in runs(server, args["threadId"])] == ["completed", "completed"]


def test_a_front_end_tool_runs_as_a_client_tool_of_that_run(server: Server) -> None:
    pick = {
        "name": "pick_color",
        "description": "Ask the user for a color",
        "parameters": {"type": "object", "properties": {"palette": {"type": "string"}}},
    }
    args = plan(
        server,
        {"runId": "c1", "message": "pick a color", "tools": [pick]},
        {"runId": "c2", "tools": [pick], "resume": [{"status": "resolved", "payload": "teal"}]},
        {"runId": "c3", "message": "pick a color", "tools": [pick]},
        {"runId": "c4", "tools": [pick], "toolResult": '"amber"'},
    )
    lines = run_client(args)
    asked = events(lines, "c1")
    [start] = [e for e in asked if e["type"] == "TOOL_CALL_START"]
    assert start["toolCallName"] == "pick_color"
    assert json.loads("".join(e["delta"] for e in asked if e["type"] == "TOOL_CALL_ARGS")) == {
        "palette": "warm"
    }
    [interrupt] = asked[-1]["outcome"]["interrupts"]
    assert interrupt["reason"] == "client_tool" and interrupt["id"] == start["toolCallId"]
    assert text(events(lines, "c2")) == "tool said: teal"
    # A tool message answering the call (AG-UI's front-end tool convention) does as well.
    assert text(events(lines, "c4")) == "tool said: amber"
    options = sql(
        server.database_url,
        "SELECT options FROM helix.runs WHERE session_id = %s ORDER BY turn",
        args["threadId"],
    )
    assert [o["client_tools"] for (o,) in options] == [["pick_color"], ["pick_color"]]


def test_reconnecting_mid_run_streams_the_same_run_to_its_end(server: Server) -> None:
    args = plan(
        server,
        {
            "runId": "g1",
            "message": "gate",
            "abortOn": {"type": "TOOL_CALL_START", "toolCallName": "gate"},
            "releaseFile": str(server.markers / "release"),
        },
    )
    lines = run_client(args)
    cut, again = attempts(lines, "g1")
    assert "RUN_FINISHED" not in types(cut)  # the client went away mid-run
    assert types(again)[0] == "RUN_STARTED" and types(again)[-1] == "RUN_FINISHED"
    assert [e["content"] for e in again if e["type"] == "TOOL_CALL_RESULT"] == ["released"]
    assert text(again) == "tool said: released"
    # The same input again is the same run: one helix run, the tool executed once.
    assert [status for _, status in runs(server, args["threadId"])] == ["completed"]
    assert len(marks(server, "gate.log")) == 1


@pytest.mark.crash
def test_a_run_survives_a_sigkill_of_the_server_and_finishes_once(server: Server) -> None:
    args = plan(server, {"runId": "k1", "message": "crash", "retry": True})
    proc = client(args)
    deadline = time.monotonic() + 120
    while not marks(server, "in_llm"):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)
    server.kill()  # mid-run: the tool ran, the next model call is under way
    server.start("again")
    lines = received(proc)
    assert any("error" in line for line in lines)  # the first attempt lost its server
    final = events(lines, "k1")
    assert types(final)[0] == "RUN_STARTED" and types(final)[-1] == "RUN_FINISHED"
    assert final[-1]["outcome"]["type"] == "success"
    assert text(final) == "tool said: sunny in Oslo"
    assert [e["content"] for e in final if e["type"] == "TOOL_CALL_RESULT"] == ["sunny in Oslo"]
    # Finished exactly once: one completed run, one tool execution.
    assert [status for _, status in runs(server, args["threadId"])] == ["completed"]
    assert marks(server, "lookup.log") == ["Oslo"]

    # A run waiting for a front-end tool keeps its declared tools across a SIGKILL: they
    # are part of its workflow input, so the recovered run takes the client's result.
    pick = {"name": "pick_color", "description": "Ask the user for a color"}
    asked = plan(server, {"runId": "f1", "message": "pick a color", "tools": [pick]})
    assert done(run_client(asked), "f1")["pending"] == ["call_pick_color"]
    server.kill()
    server.start("again")
    answer = {"interruptId": "call_pick_color", "status": "resolved", "payload": "teal"}
    resumed = {**asked, "steps": [{"runId": "f2", "resume": [answer], "retry": True}]}
    evs = events(run_client(resumed), "f2")
    assert text(evs) == "tool said: teal" and evs[-1]["outcome"]["type"] == "success"
    assert [status for _, status in runs(server, asked["threadId"])] == ["completed"]


def test_bad_input_is_a_json_4xx_and_the_route_is_documented(server: Server) -> None:
    url = f"{server.url}/ag-ui/assistant"
    good = {"threadId": "t-bad", "runId": "r", "messages": []}
    assert httpx.post(url, json=good).status_code == 401  # the same bearer auth
    missing = httpx.post(url, json={"runId": "r", "messages": []}, headers=AUTH)
    assert missing.status_code == 422 and "threadId" in missing.json()["detail"]
    ghost = httpx.post(f"{server.url}/ag-ui/ghost", json=good, headers=AUTH)
    assert ghost.status_code == 404 and "ghost" in ghost.json()["detail"]
    answer = {**good, "resume": [{"interruptId": "nope", "status": "resolved"}]}
    assert httpx.post(url, json=answer, headers=AUTH).status_code == 404
    taken = {**good, "tools": [{"name": "lookup", "description": "clash"}]}
    clash = httpx.post(url, json=taken, headers=AUTH)
    assert clash.status_code == 422 and "lookup" in clash.json()["detail"]
    bad_id = httpx.post(url, json=good, headers={**AUTH, "Last-Event-ID": "x"})
    assert bad_id.status_code == 422
    spec = httpx.get(f"{server.url}/openapi.json", headers=AUTH).json()
    assert "/ag-ui/{agent}" in spec["paths"]
