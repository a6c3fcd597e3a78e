"""The Vercel AI SDK's UI message stream (docs/protocols/ai-sdk.md), driven by the `ai`
npm package's own chat client under Node (tests/js/ai_sdk/chat.mjs) against a real helix
server process (tests/apps/ai_sdk_app.py): a plain run, a tool call, approvals approved and
denied, a page reload mid-run, a SIGKILL of the server mid-run, and bad input."""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import forkserver
import httpx
import pytest
from docs_text import PAGES, REPO
from helpers import lines, sql, wait_for
from live_server import ServerProcess, answers, free_port

APP = Path(__file__).parent / "apps" / "ai_sdk_app.py"
JS = Path(__file__).parent / "js" / "ai_sdk"
TOKEN = "ai-sdk-secret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

pytestmark = pytest.mark.crash  # a database of its own: the tests kill servers


@pytest.fixture(scope="session")
def node_client() -> Path:
    """The `ai` package installed from the committed lock file (once)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("Node.js and npm are needed for the AI SDK tests")
    if not (JS / "node_modules" / "ai").exists():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=JS, check=True, timeout=600)
    return JS / "chat.mjs"


class Server(ServerProcess):
    """The helix server process; `start()` again after `kill()` relaunches it as it was
    (same port, database and executor id, so DBOS recovers its runs)."""

    def __init__(self, database_url: str, markers: Path) -> None:
        super().__init__(markers / "server.out")
        self.database_url, self.markers = database_url, markers
        self.executor = f"ai-sdk-{uuid.uuid4().hex[:8]}"

    def start(self) -> Server:
        args = [sys.executable, str(APP), self.database_url, str(self.port)]
        self.launch(
            [*args, self.executor, str(self.markers)], answers(f"{self.url}/openapi.json", AUTH)
        )
        return self


@pytest.fixture
def server(database_url: str, tmp_path: Path) -> Iterator[Server]:
    running = Server(database_url, tmp_path).start()
    try:
        yield running
    finally:
        running.stop()


class Node:
    """One run of chat.mjs; its JSON lines as they come."""

    def __init__(self, script: Path, *args: str) -> None:
        self.proc = subprocess.Popen(
            ["node", str(script), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,  # unbuffered: `select` sees every line not yet read
        )
        self.events: list[dict[str, Any]] = []

    def read_until(self, predicate: Any, timeout: float = 120) -> dict[str, Any]:
        """Read lines until one matches (the process stays up)."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.5)
            if not ready:
                continue
            line = self.proc.stdout.readline()
            if not line:
                break
            event = json.loads(line)
            self.events.append(event)
            if predicate(event):
                return event
        self.proc.kill()
        stderr = self.proc.stderr.read().decode() if self.proc.stderr else ""
        raise AssertionError(f"no such event in {self.events}; stderr: {stderr}")

    def finish(self, timeout: float = 120) -> dict[str, Any]:
        """The final `messages` event."""
        event = self.read_until(lambda e: e["event"] == "messages", timeout)
        assert self.proc.wait(timeout=30) == 0, self.proc.stderr.read() if self.proc.stderr else ""
        return event

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)


def run_node(script: Path, *args: str) -> dict[str, Any]:
    """The final `messages` event, with every event before it under `_events`."""
    node = Node(script, *args)
    final = node.finish()
    return {**final, "_events": node.events}


def reported_events(final: dict[str, Any]) -> list[dict[str, Any]]:
    return final["_events"]


def assistant(event: dict[str, Any]) -> dict[str, Any]:
    [message] = [m for m in event["messages"] if m["role"] == "assistant"]
    return message


def texts(message: dict[str, Any]) -> list[str]:
    return [p["text"] for p in message["parts"] if p["type"] == "text"]


def tool_parts(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in message["parts"] if p["type"].startswith("tool-")]


def completed_chunks(database_url: str, session_id: str) -> list[tuple]:
    return sql(
        database_url,
        "SELECT r.run_id, r.status, (SELECT count(*) FROM helix.stream_chunks c "
        "WHERE c.run_id = r.run_id AND c.type = 'run_completed') "
        "FROM helix.runs r WHERE r.session_id = %s",
        session_id,
    )


def test_plain_run_tool_call_and_approvals(server: Server, node_client: Path) -> None:
    base = (server.url, TOKEN)
    plain = run_node(node_client, "send", *base, "chat-plain", "hello")
    message = assistant(plain)
    assert texts(message) == ["Hello there! How can I help?"]
    assert plain["finishes"] == ["stop"] and plain["status"] == "ready"
    [(run_id, status, completed)] = completed_chunks(server.database_url, "chat-plain")
    assert message["id"] == run_id and status == "completed" and completed == 1

    weather = assistant(run_node(node_client, "send", *base, "chat-tool", "weather Paris"))
    [call] = tool_parts(weather)
    assert call["type"] == "tool-lookup" and call["state"] == "output-available"
    assert call["input"] == {"city": "Paris"} and call["output"] == "sunny in Paris"
    assert texts(weather) == ["Result: sunny in Paris"]
    assert [p["type"] for p in weather["parts"]].count("step-start") == 2

    approved = run_node(node_client, "send", *base, "chat-approve", "delete /tmp/a", "approve")
    asked = [e for e in approved["messages"] if e["role"] == "assistant"]
    assert len(asked) == 1  # the answer's response continues the same message
    [part] = tool_parts(asked[0])
    assert part["type"] == "tool-delete_file" and part["state"] == "output-available"
    assert part["approval"]["approved"] is True and part["output"] == "deleted /tmp/a"
    assert texts(asked[0]) == ["Result: deleted /tmp/a"]
    assert approved["finishes"] == ["tool-calls", "stop"]
    assert lines(server.markers, "delete_file.log") == ["/tmp/a"]

    denied = assistant(run_node(node_client, "send", *base, "chat-deny", "delete /tmp/b", "deny"))
    [part] = tool_parts(denied)
    assert part["state"] == "output-denied" and part["approval"]["approved"] is False
    assert lines(server.markers, "delete_file.log") == ["/tmp/a"]  # /tmp/b never ran
    for session in ("chat-approve", "chat-deny"):
        [(_, status, completed)] = completed_chunks(server.database_url, session)
        assert status == "completed" and completed == 1

    # A sub-agent's approval: a tool part of the chat's message, answered through the chat.
    delegated = run_node(node_client, "send", *base, "chat-delegate", "delegate /tmp/c", "approve")
    message = assistant(delegated)
    parts = {p["type"]: p for p in tool_parts(message)}
    assert parts["tool-delete_file"]["approval"]["approved"] is True
    assert parts["tool-delete_file"]["output"] == "deleted /tmp/c"
    assert parts["tool-subagent__helper"]["state"] == "output-available"
    assert texts(message) == ["Result: Result: deleted /tmp/c"]
    assert delegated["finishes"] == ["tool-calls", "stop"]

    # A client-side tool: the browser runs it (onToolCall, addToolOutput), the run goes on.
    located = run_node(node_client, "send", *base, "chat-client", "locate ada", "client")
    message = assistant(located)
    [part] = tool_parts(message)
    assert part["type"] == "tool-locate" and part["output"] == {"place": "the desk of ada"}
    assert texts(message) == ['Result: {"place":"the desk of ada"}']
    assert located["finishes"] == ["tool-calls", "stop"]

    # Reasoning, a tool's custom event and state as data parts, a failing tool.
    thought = assistant(run_node(node_client, "send", *base, "chat-think", "think hard"))
    assert [(p["type"], p.get("text")) for p in thought["parts"] if p["type"] != "step-start"] == [
        ("text", "Thought about hard"),  # helix writes a reply's thinking once it is in
        ("reasoning", "pondering hard"),
    ]
    reported = run_node(node_client, "send", *base, "chat-report", "report owls")
    message = assistant(reported)
    [progress] = [p for p in message["parts"] if p["type"] == "data-progress"]
    assert progress["data"] == {"topic": "owls", "percent": 100}
    [state] = [p for p in message["parts"] if p["type"] == "data-helix-state"]
    assert state["data"]["set"] == {"topic": "owls"}
    assert {"event": "data", "type": "data-progress", "data": progress["data"]} in [
        {k: e.get(k) for k in ("event", "type", "data")} for e in reported_events(reported)
    ]
    failed = assistant(run_node(node_client, "send", *base, "chat-broken", "broken glass"))
    [part] = tool_parts(failed)
    assert part["state"] == "output-error" and "broken on glass" in part["errorText"]

    # A reloaded page with nothing live: 204, and the chat stays empty and ready.
    idle = run_node(node_client, "resume", *base, "chat-plain")
    assert idle["messages"] == [] and idle["status"] == "ready"


def test_reload_mid_run_reconnects_to_the_live_run(server: Server, node_client: Path) -> None:
    first = Node(node_client, "send", server.url, TOKEN, "chat-reload", "slow r1")
    first.read_until(lambda e: e["event"] == "status" and e["status"] == "streaming")
    wait_for(lambda: lines(server.markers, "slow_r1.log"))
    first.kill()  # the page goes away mid-run
    again = Node(node_client, "resume", server.url, TOKEN, "chat-reload")
    again.read_until(lambda e: e["event"] == "status" and e["status"] == "streaming")
    (server.markers / "release_r1").touch()
    message = assistant(again.finish())
    [call] = tool_parts(message)
    assert call["state"] == "output-available" and call["output"] == "slept on r1"
    assert texts(message) == ["Result: slept on r1"]
    [(run_id, status, completed)] = completed_chunks(server.database_url, "chat-reload")
    assert message["id"] == run_id and status == "completed" and completed == 1
    assert lines(server.markers, "slow_r1.log") == ["x"]


def test_server_sigkill_mid_run_resumes_and_finishes_once(
    server: Server, node_client: Path
) -> None:
    first = Node(node_client, "send", server.url, TOKEN, "chat-crash", "slow k1")
    first.read_until(lambda e: e["event"] == "status" and e["status"] == "streaming")
    wait_for(lambda: lines(server.markers, "slow_k1.log"))
    server.kill()  # the server dies mid-run: the client's stream breaks
    first.read_until(lambda e: e["event"] == "finish")
    first.kill()
    server.start()  # relaunched on the same database: DBOS recovers the run
    wait_for(lambda: len(lines(server.markers, "slow_k1.log")) == 2)  # the tool runs again
    again = Node(node_client, "resume", server.url, TOKEN, "chat-crash")
    again.read_until(lambda e: e["event"] == "status" and e["status"] == "streaming")
    (server.markers / "release_k1").touch()
    event = again.finish()
    message = assistant(event)
    assert texts(message) == ["Result: slept on k1"]
    assert event["finishes"] == ["stop"]
    [(run_id, status, completed)] = completed_chunks(server.database_url, "chat-crash")
    assert message["id"] == run_id and status == "completed" and completed == 1
    answers = sql(
        server.database_url,
        "SELECT count(*) FROM helix.messages WHERE session_id = %s AND role = 'assistant'",
        "chat-crash",
    )
    assert answers == [(2,)]  # the tool call and the answer, each once


def test_bad_input_gets_the_protocols_error_shape(server: Server, node_client: Path) -> None:
    url = f"{server.url}/ai-sdk/chat"

    def post(body: Any, **kw: Any) -> httpx.Response:
        return httpx.post(url, headers=AUTH, timeout=10, **kw, json=body)

    cases = [
        (post({"id": "x", "messages": []}), 422, "messages"),
        (post({"id": "x"}), 422, "messages"),
        (post({"id": "x", "messages": [{"role": "user", "parts": []}]}), 422, "no text"),
        (post({"id": "x" * 500, "messages": [{"role": "user", "parts": []}]}), 422, "limit"),
        (
            post(
                {
                    "id": "x",
                    "messages": [{"role": "user", "parts": [{"type": "text", "text": "hello"}]}],
                    "agent": "ghost",
                }
            ),
            404,
            "ghost",
        ),
        (
            post({"id": "nothing-waits", "messages": [{"role": "assistant", "parts": []}]}),
            404,
            "nothing-waits",
        ),
        (
            post(
                {
                    "id": "x",
                    "messages": [{"role": "user", "parts": [{"type": "text", "text": "hi"}]}],
                    "trigger": "regenerate-message",
                }
            ),
            422,
            "regenerate",
        ),
        (
            httpx.post(
                url,
                headers={**AUTH, "content-type": "application/json"},
                content=b"{nope",
                timeout=10,
            ),
            400,
            "JSON",
        ),
    ]
    for response, status, words in cases:
        assert response.status_code == status, response.text
        body = response.json()
        assert body["type"] == "error" and words in body["errorText"], body
    assert httpx.post(url, json={"id": "x", "messages": []}, timeout=10).status_code == 401
    hello = {
        "id": "raw",
        "messages": [{"role": "user", "parts": [{"type": "text", "text": "hello"}]}],
    }
    with httpx.stream("POST", url, headers=AUTH, json=hello, timeout=60) as response:
        assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
        assert response.headers["content-type"].startswith("text/event-stream")
        wire = response.read().decode()
    assert wire.rstrip().endswith("data: [DONE]")
    # A second user message while nothing is live starts the next turn; one while the
    # chat's run waits for an approval is refused in the protocol's shape.
    waiting = {**hello, "id": "busy"}
    waiting["messages"] = [{"role": "user", "parts": [{"type": "text", "text": "delete /x"}]}]
    with httpx.stream("POST", url, headers=AUTH, json=waiting, timeout=60) as response:
        assert '"tool-approval-request"' in response.read().decode()
    busy = post(waiting)
    assert busy.status_code == 409 and busy.json()["type"] == "error", busy.text
    [(call_id,)] = sql(
        server.database_url, "SELECT tool_call_id FROM helix.tool_calls WHERE session_id = 'busy'"
    )
    part = {"type": "tool-delete_file", "toolCallId": call_id, "state": "approval-responded"}
    answer = {"id": "busy", "messages": [{"role": "assistant", "parts": [part]}]}
    part["approval"] = {"id": call_id, "approved": "yes"}
    unclear = post(answer)
    assert unclear.status_code == 422 and "boolean" in unclear.json()["errorText"]
    part["approval"] = {"id": call_id, "approved": False, "reason": "x" * 2_000_000}
    assert post(answer).status_code == 413  # the edge guard's body limit
    [(status,)] = sql(
        server.database_url, "SELECT status FROM helix.tool_calls WHERE session_id = 'busy'"
    )
    assert status == "pending"  # nothing was applied
    # A page reloaded while the run waits for the approval shows the request again.
    reloaded = run_node(node_client, "resume", server.url, TOKEN, "busy")
    [part] = tool_parts(assistant(reloaded))
    assert part["state"] == "approval-requested" and part["approval"]["id"] == call_id
    assert reloaded["finishes"] == ["tool-calls"]
    resume = httpx.get(f"{server.url}/ai-sdk/chat/never-seen/stream", headers=AUTH, timeout=10)
    assert resume.status_code == 204
    paths = httpx.get(f"{server.url}/openapi.json", headers=AUTH, timeout=10).json()["paths"]
    assert "/ai-sdk/chat" in paths and "/ai-sdk/chat/{chat_id}/stream" in paths


def test_the_docs_example_drives_the_example_server(database_url, node_client, tmp_path):
    """docs/protocols/ai-sdk.md's Node program (examples/ai_sdk_chat.mjs, included in the
    page) against examples/server.py: it asks, approves, and prints what the page says."""
    page = PAGES["docs/protocols/ai-sdk.md"]
    assert '--8<-- "examples/ai_sdk_chat.mjs"' in page
    script = tmp_path / "ai_sdk_chat.mjs"
    shutil.copy(REPO / "examples" / "ai_sdk_chat.mjs", script)
    (tmp_path / "node_modules").symlink_to(JS / "node_modules")
    port = free_port()
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("HELIX_", "ANTHROPIC_", "OPENAI_"))
    }
    env |= {"HELIX_DATABASE_URL": database_url, "PORT": str(port)}
    log = open(tmp_path / "server.out", "wb")  # noqa: SIM115  (the process's)
    server = forkserver.Popen(
        [sys.executable, str(REPO / "examples" / "server.py")], env=env, stdout=log, stderr=log
    )
    url = f"http://127.0.0.1:{port}"
    try:

        def up() -> bool:
            assert server.poll() is None, (tmp_path / "server.out").read_text()
            try:
                return httpx.get(f"{url}/openapi.json", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, timeout=90)
        done = subprocess.run(
            ["node", str(script)],
            env={**env, "HELIX_URL": url},
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    assert printed == [
        'approving tool-delete_file {"path":"/tmp/helix-ai-sdk-demo.txt"}',
        "finish: stop",
        "The clean-up is done.",
    ]
    assert "\n".join(printed) in page
