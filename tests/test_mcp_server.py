"""Agents as MCP tools (issue 33): a real helix server process (`mcp_agents_app.py`)
driven by the `mcp` SDK's own client over streamable HTTP. A plain call, a tool call
that is an MCP task (task id = run id), an approval round trip by elicitation (and by
the inbox for a client that cannot elicit), a reconnect mid-run, a SIGKILL of the
server mid-run, and bad input answered in the protocol's shape."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import anyio
import forkserver
import httpx
import pytest

pytest.importorskip("mcp")

import httpx2
import mcp_types as types
from docs_text import REPO, code_blocks, env_for, section
from helpers import lines, sql, wait_for
from live_server import ServerProcess, answers, free_port
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from helix_dbos import HelixClient
from helix_dbos import MCPTasks as tc
from helix_dbos.runtime.steps.results import PendingToolCall, RunInfo
from helix_dbos.server.protocols import mcp_tasks
from helix_dbos.server.protocols.mcp_task_client import TaskCreated, TaskState
from helix_dbos.server.protocols.mcp_tasks import TASKS_EXTENSION

APP = Path(__file__).parent / "apps" / "mcp_agents_app.py"
TOKEN = "mcp-secret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

pytestmark = pytest.mark.crash  # a database of its own: the server process is killed


class NoTaskId(types.Request[types.RequestParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: types.RequestParams


class Server(ServerProcess):
    """The MCP server process; `start()` again after `kill()` relaunches it as it was."""

    def __init__(self, database_url: str, markers: Path) -> None:
        super().__init__(markers / "server.out")
        self.database_url, self.markers = database_url, markers
        self.base, self.url = self.url, f"{self.url}/mcp"
        self.executor = f"mcp-{uuid.uuid4().hex[:8]}"

    def start(self) -> Server:
        args = [sys.executable, str(APP), self.database_url, str(self.port), self.executor]
        self.launch([*args, str(self.markers)], answers(f"{self.base}/openapi.json"))
        return self


@contextmanager
def running(database_url: str, markers: Path) -> Iterator[Server]:
    server = Server(database_url, markers).start()
    try:
        yield server
    finally:
        server.stop()
        print((markers / "server.out").read_text())  # shown when the test fails


async def approve_all(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    assert isinstance(params, types.ElicitRequestFormParams)
    assert params.requested_schema["required"] == ["approved"]
    return types.ElicitResult(action="accept", content={"approved": True, "reason": "fine"})


async def decline_all(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="decline")


@asynccontextmanager
async def session(
    url: str, *, tasks: bool = True, elicit: Any = None
) -> AsyncIterator[ClientSession]:
    """A modern (2026-07-28) session of the SDK's `ClientSession`; with `tasks`, it
    speaks the tasks extension and receives the task shape itself."""
    async with (
        httpx2.AsyncClient(headers=AUTH, timeout=httpx2.Timeout(30, read=120)) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(
            read,
            write,
            elicitation_callback=elicit,
            extensions={TASKS_EXTENSION: {}} if tasks else None,
            result_claims=tc.session_claims() if tasks else None,
        ) as mcp_session,
    ):
        await mcp_session.discover()
        yield mcp_session


async def start_task(s: ClientSession, tool: str, text: str) -> str:
    created = await s.call_tool(tool, {"input": text}, allow_claimed=True)
    assert isinstance(created, TaskCreated), created
    assert created.task.status in ("working", "completed")
    return created.task.task_id


async def poll(s: ClientSession, task_id: str, until: set[str]) -> TaskState:
    with anyio.fail_after(90):
        while True:
            state = await tc.get(s, task_id)
            if state.status in until:
                return state
            await anyio.sleep(0.1)


def run_row(database_url: str, run_id: str) -> tuple:
    [row] = sql(
        database_url, "SELECT session_id, status, output FROM helix.runs WHERE run_id = %s", run_id
    )
    return row


async def test_plain_calls_tools_and_bad_input_in_the_protocol_s_shape(database_url, tmp_path):
    with running(database_url, tmp_path) as server:
        http = httpx2.AsyncClient(headers=AUTH, timeout=30)
        async with http, Client(streamable_http_client(server.url, http_client=http)) as client:
            listed = await client.list_tools()
            assert sorted(t.name for t in listed.tools) == ["deployer", "echo", "slow"]
            echo = next(t for t in listed.tools if t.name == "echo")
            assert echo.input_schema["required"] == ["input"]

            result = await client.call_tool("echo", {"input": "hello"})
            assert result.is_error is False
            assert result.content[0].text == "echo: hello"  # type: ignore[union-attr]
            run_id = result.structured_content["run_id"]
            session_id, status, _ = run_row(database_url, run_id)
            assert status == "completed" and session_id.startswith("mcp_")

            nul = await client.call_tool("echo", {"input": "a\x00b"})
            assert nul.is_error is True and "NUL" in nul.content[0].text  # type: ignore[union-attr]
            with pytest.raises(MCPError) as no_id:  # tasks/get without its taskId
                await client.session.send_request(NoTaskId(params=types.RequestParams()), TaskState)
            assert no_id.value.code == types.INVALID_PARAMS
            bad = await client.call_tool("echo", {"text": "no input field"})
            assert bad.is_error is True and "input" in bad.content[0].text  # type: ignore[union-attr]
            with pytest.raises(MCPError) as unknown:
                await client.call_tool("hidden", {"input": "x"})
            assert unknown.value.code == types.INVALID_PARAMS
            with pytest.raises(MCPError) as no_task:
                await tc.get(client.session, "run_does_not_exist")
            assert no_task.value.code == types.INVALID_PARAMS
            with pytest.raises(MCPError) as not_mcp:  # a run that is no MCP task
                await tc.get(client.session, "")
            assert not_mcp.value.code == types.INVALID_PARAMS

        # A handshake-era (2025-11-25) client: plain calls; an approval waits in the inbox.
        http = httpx2.AsyncClient(headers=AUTH, timeout=30)
        legacy = Client(streamable_http_client(server.url, http_client=http), mode="legacy")
        async with http, legacy as client:
            assert client.protocol_version == "2025-11-25"
            result = await client.call_tool("echo", {"input": "old"})
            assert result.content[0].text == "echo: old"  # type: ignore[union-attr]
            waits = await client.call_tool("deployer", {"input": "later"})
            assert waits.is_error is False and "inbox" in waits.content[0].text  # type: ignore[union-attr]
            run_id = waits.structured_content["run_id"]
            state = await tc.get(client.session, run_id)  # the run id is the task id
            assert state.status == "input_required"
        assert lines(tmp_path, "deploy.log") == []
        # ... and one that elicits is asked with `elicitation/create` on the call's stream.
        http = httpx2.AsyncClient(headers=AUTH, timeout=60)
        legacy = Client(
            streamable_http_client(server.url, http_client=http),
            mode="legacy",
            elicitation_callback=approve_all,
        )
        async with http, legacy as client:
            result = await client.call_tool("deployer", {"input": "legacy"})
            assert result.content[0].text == "deployer: deployed legacy"  # type: ignore[union-attr]
        assert lines(tmp_path, "deploy.log") == ["legacy"]

        # The edge guard's auth and limits hold on /mcp; nothing is a 5xx.
        ping = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        headers = {
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": "2026-07-28",
        }
        assert httpx.post(server.url, json=ping, headers=headers).status_code == 401
        garbled = httpx.post(server.url, content=b"{not json", headers=headers | AUTH)
        assert 400 <= garbled.status_code < 500
        huge = httpx.post(
            server.url, content=b'"' + b"x" * 2_000_000 + b'"', headers=headers | AUTH
        )
        assert huge.status_code == 413
        spec = httpx.get(f"{server.base}/openapi.json").json()
        assert set(spec["paths"]["/mcp"]) == {"post", "get", "delete"}


async def test_a_tool_call_is_a_task_and_an_approval_is_an_elicitation(database_url, tmp_path):
    with running(database_url, tmp_path) as server:
        # A task: its id is the helix run id; polled to completed, then its result.
        async with session(server.url) as s:
            task_id = await start_task(s, "echo", "tasked")
            assert run_row(database_url, task_id)[0].startswith("mcp_")
            await poll(s, task_id, {"completed"})
            result = await tc.result(s, task_id)
            assert result.content[0].text == "echo: tasked"  # type: ignore[union-attr]
            assert task_id in [t.task_id for t in (await tc.list(s)).tasks]

        # The approval round trip: input_required with an elicitation, answered back.
        async with session(server.url, elicit=approve_all) as s:
            task_id = await start_task(s, "deployer", "prod")
            state = await poll(s, task_id, {"input_required"})
            assert state.input_requests and len(state.input_requests) == 1
            assert "deploy" in (state.status_message or "")
            await tc.answer_inputs(s, state)
            await poll(s, task_id, {"completed"})
            result = await tc.result(s, task_id)
            assert result.content[0].text == "deployer: deployed prod"  # type: ignore[union-attr]
        assert lines(tmp_path, "deploy.log") == ["prod"]

        # A client that cannot elicit: the task says input_required, the inbox answers.
        async with session(server.url) as s:
            task_id = await start_task(s, "deployer", "staging")
            state = await poll(s, task_id, {"input_required"})
            assert state.input_requests is None and "inbox" in (state.status_message or "")
            session_id = run_row(database_url, task_id)[0]
            with HelixClient(server.base, token=TOKEN) as helix:
                [pending] = helix.status(session_id).pending_tool_calls
                helix.approve(session_id, pending.tool_call_id)
            await poll(s, task_id, {"completed"})
        assert lines(tmp_path, "deploy.log") == ["prod", "staging"]

        # Without tasks: the SDK's Client runs the input_required loop (approve, decline).
        http = httpx2.AsyncClient(headers=AUTH, timeout=60)
        async with (
            http,
            Client(
                streamable_http_client(server.url, http_client=http),
                elicitation_callback=approve_all,
            ) as client,
        ):
            result = await client.call_tool("deployer", {"input": "eu"})
            assert result.content[0].text == "deployer: deployed eu"  # type: ignore[union-attr]
        http = httpx2.AsyncClient(headers=AUTH, timeout=60)
        async with (
            http,
            Client(
                streamable_http_client(server.url, http_client=http),
                elicitation_callback=decline_all,
            ) as client,
        ):
            result = await client.call_tool("deployer", {"input": "us"})
            assert "deployed us" not in result.content[0].text  # type: ignore[union-attr]
        assert lines(tmp_path, "deploy.log") == ["prod", "staging", "eu"]

        # The SDK's Client with the MCPTasks extension follows a task transparently.
        http = httpx2.AsyncClient(headers=AUTH, timeout=60)
        async with (
            http,
            Client(
                streamable_http_client(server.url, http_client=http),
                extensions=[tc(poll_seconds=0.1)],
                elicitation_callback=approve_all,
            ) as client,
        ):
            result = await client.call_tool("deployer", {"input": "asia"})
            assert result.content[0].text == "deployer: deployed asia"  # type: ignore[union-attr]

        # Cancel: the run is aborted; a finished task cannot be cancelled.
        async with session(server.url) as s:
            task_id = await start_task(s, "slow", "forever")
            wait_for(lambda: lines(tmp_path, "wait_forever.log"))
            cancelled = await tc.cancel(s, task_id)
            assert cancelled.status == "cancelled"
            assert run_row(database_url, task_id)[1] == "aborted"
            with pytest.raises(MCPError) as again:
                await tc.cancel(s, task_id)
            assert again.value.code == types.INVALID_PARAMS


async def test_reconnect_and_sigkill_mid_run_find_the_task_and_finish_it_once(
    database_url, tmp_path
):
    server = Server(database_url, tmp_path).start()
    try:
        # Reconnect: the session that started the task is gone; a new one polls it.
        async with session(server.url) as s:
            task_id = await start_task(s, "slow", "reconnect")
        wait_for(lambda: lines(tmp_path, "wait_reconnect.log"))
        async with session(server.url) as s:
            assert (await tc.get(s, task_id)).status == "working"
            (tmp_path / "release_reconnect").touch()
            await poll(s, task_id, {"completed"})
            result = await tc.result(s, task_id)
            assert result.content[0].text == "slow: done reconnect"  # type: ignore[union-attr]

        # SIGKILL mid-run: after the relaunch the task is found and the run ends once.
        async with session(server.url) as s:
            killed = await start_task(s, "slow", "killed")
        wait_for(lambda: lines(tmp_path, "wait_killed.log"))
        server.kill()
        (tmp_path / "release_killed").touch()
        server.start()
        async with session(server.url) as s:
            await poll(s, killed, {"completed"})
            result = await tc.result(s, killed)
            assert result.content[0].text == "slow: done killed"  # type: ignore[union-attr]
            assert {killed, task_id} <= {t.task_id for t in (await tc.list(s)).tasks}
    finally:
        server.stop()
        print((tmp_path / "server.out").read_text())  # shown when the test fails
    session_id, status, output = run_row(database_url, killed)
    assert (status, output) == ("completed", "slow: done killed")
    assert len(sql(database_url, "SELECT 1 FROM helix.runs WHERE session_id = %s", session_id)) == 1
    # The tool ran again (it was cut short), the LLM's first answer was not asked again.
    assert lines(tmp_path, "wait_killed.log") == ["x", "x"]
    assert len(lines(tmp_path, "llm_slow.log")) == 4  # two per run: reconnect's and killed's


def test_the_example_and_the_docs_run_against_helix_dbos_serve_mcp(database_url, tmp_path):
    """`helix-dbos serve --mcp-agent ...` serving examples/mcp_agents.py; the example's
    `call` and the page's reconnect script run as a user runs them."""
    cli = [sys.executable, "-m", "helix_dbos.cli", "serve", "--app", "examples/mcp_agents.py:helix"]
    ghost = forkserver.run(
        [*cli, "--allow-unauthenticated", "--mcp-agent", "ghost"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=env_for(database_url),
    )
    assert ghost.returncode == 2 and "ghost" in ghost.stderr, ghost.stderr
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    log = open(tmp_path / "serve.out", "wb")  # noqa: SIM115  (the process's)
    proc = forkserver.Popen(
        [
            *cli,
            "--allow-unauthenticated",
            "--port",
            str(port),
            "--mcp-agent",
            "greeter",
            "--mcp-agent",
            "deployer",
        ],
        cwd=REPO,
        stdout=log,
        stderr=log,
        env=env_for(database_url, HELIX_EXECUTOR_ID="mcp-cli-test"),
    )
    try:
        wait_for(
            lambda: _up(f"http://127.0.0.1:{port}/openapi.json") or proc.poll() is not None, 90
        )
        assert proc.poll() is None, (tmp_path / "serve.out").read_text()
        called = forkserver.run(
            [sys.executable, "examples/mcp_agents.py", "call", "deployer", "prod", "--yes"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
            env=env_for(database_url, MCP_URL=url),
        )
        assert called.returncode == 0, called.stderr
        assert called.stdout.strip() == "Deployment: deployed to prod."
        script = tmp_path / "poll.py"
        [snippet] = code_blocks(section("Poll or cancel a task from another connection"), "python")
        script.write_text(snippet)
        polled = forkserver.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env=env_for(database_url, MCP_URL=url),
        )
        assert polled.returncode == 0, polled.stderr
        assert polled.stdout.strip() == "True Hello, Ada!"
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    assert "MCP at" in (tmp_path / "serve.out").read_text()


def _up(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.parametrize(
    ("status", "pending", "expected"),
    [
        ("running", False, "working"),
        ("waiting", True, "input_required"),
        ("waiting", False, "working"),  # on its sub-agents, or an answer not applied yet
        ("completed", False, "completed"),
        ("failed", False, "failed"),
        ("interrupted", False, "cancelled"),
        ("aborted", False, "cancelled"),
    ],
)
def test_run_statuses_map_to_task_statuses(status, pending, expected):
    run = RunInfo(
        run_id="run_1", session_id="mcp_1", workflow_id="w", agent_name="a", turn=1,
        status=status, step_count=1, started_at=datetime(2026, 11, 26, tzinfo=timezone.utc),
    )  # fmt: skip
    calls = [
        PendingToolCall(tool_call_id="c1", tool_name="deploy", kind="approval", run_id="run_1")
    ]
    task = mcp_tasks.task_of(run, calls if pending else [], "/inbox")
    assert (task.task_id, task.status, task.created_at) == (
        "run_1",
        expected,
        "2026-11-26T00:00:00+00:00",
    )
    wire = mcp_tasks.task_wire(task)
    assert wire["ttl"] is None and wire["taskId"] == "run_1"


def test_elicitation_answers_become_approvals_and_garbage_is_refused():
    calls = [
        PendingToolCall(tool_call_id="c1", tool_name="deploy", kind="approval", run_id="r"),
        PendingToolCall(tool_call_id="c2", tool_name="deploy", kind="approval", run_id="r"),
        PendingToolCall(tool_call_id="c3", tool_name="locate", kind="client", run_id="r"),
    ]
    answers = mcp_tasks.read_answers(
        {
            "c1": {"action": "accept", "content": {"approved": True, "reason": "ok"}},
            "c2": {"action": "decline"},
            "c3": {"action": "accept", "content": {"approved": True}},  # no approval: ignored
            "zz": {"action": "accept"},  # unknown: ignored
        },
        calls,
    )
    assert [(a.tool_call_id, a.approved) for a in answers] == [("c1", True), ("c2", False)]
    assert answers[0].reason == "ok" and "decline" in (answers[1].reason or "")
    with pytest.raises(ValueError, match="c1"):
        mcp_tasks.read_answers({"c1": {"action": "maybe"}}, calls)
    assert list(mcp_tasks.input_requests(calls)) == ["c1", "c2"]
