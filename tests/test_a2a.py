"""A2A 1.0 (issue 33) against a real helix server process, driven by `a2a-sdk`'s own
client: a plain run, a tool call, an approval round trip, a reconnect mid-run with
`SubscribeToTask`, a SIGKILL of the server mid-run, bad input, and a helix parent
delegating to an A2A child served by a second server (parent SIGKILLed mid-call)."""

from __future__ import annotations

import asyncio
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import forkserver
import httpx
import pytest
from a2a.client import A2AClientError, Client, ClientConfig
from a2a.client.client_factory import ClientFactory
from a2a.helpers import get_data_parts, get_text_parts, new_data_part, new_text_part
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import (
    InvalidParamsError,
    InvalidRequestError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from conftest import _new_database
from docs_text import code_blocks, env_for, run_pasted, section
from helpers import lines, sql, wait_for
from live_server import ServerProcess, answers, serve

from helix_dbos import HelixClient, tool
from helix_dbos.runtime.children.remote_children import remote_session_id, remote_start_key
from helix_dbos.server import create_app

APP = Path(__file__).parent / "apps" / "a2a_app.py"
TOKEN = "a2a-secret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
VERSION = {"A2A-Version": "1.0"}
pytestmark = pytest.mark.crash


class Server(ServerProcess):
    """One helix server process (tests/apps/a2a_app.py); `start()` again after `kill()`."""

    def __init__(self, database_url: str, markers: Path, child_url: str = "") -> None:
        self.executor = f"a2a-{uuid.uuid4().hex[:8]}"
        super().__init__(markers / f"{self.executor}.out")  # two servers share `markers`
        self.database_url, self.markers, self.child_url = database_url, markers, child_url

    def start(self) -> Server:
        args = [sys.executable, str(APP), self.database_url, str(self.port), self.executor]
        args += [str(self.markers)] + ([self.child_url] if self.child_url else [])
        self.launch(args, answers(f"{self.agent('echo')}/.well-known/agent-card.json", AUTH))
        return self

    def agent(self, name: str) -> str:
        return f"{self.url}/a2a/{name}"


@contextmanager
def running(database_url: str, markers: Path, child_url: str = "") -> Iterator[Server]:
    server = Server(database_url, markers, child_url)
    try:
        yield server.start()
    finally:
        server.stop()


@asynccontextmanager
async def a2a(url: str, *, streaming: bool = True) -> AsyncIterator[Client]:
    """`a2a-sdk`'s client for the agent at `url`, as any A2A caller would make it."""
    async with httpx.AsyncClient(headers=AUTH, timeout=60) as http:
        factory = ClientFactory(ClientConfig(streaming=streaming, httpx_client=http))
        client = await factory.create_from_url(url)
        try:
            yield client
        finally:
            await client.close()


def user_message(*parts, task_id: str = "", context_id: str = "") -> Message:
    return Message(
        message_id=uuid.uuid4().hex,
        role=Role.ROLE_USER,
        parts=[new_text_part(p) if isinstance(p, str) else new_data_part(p) for p in parts],
        task_id=task_id,
        context_id=context_id,
    )


def state_of(event: StreamResponse) -> int | None:
    if event.HasField("task"):
        return event.task.status.state
    if event.HasField("status_update"):
        return event.status_update.status.state
    return None


def response_text(task) -> str:
    [artifact] = [a for a in task.artifacts if a.artifact_id == "response"]
    return "\n".join(get_text_parts(artifact.parts))


def release(markers: Path, topic: str) -> None:
    (markers / f"release_{topic}").touch()


def runs_of(database_url: str, session_id: str) -> list[tuple]:
    return sql(
        database_url,
        "SELECT run_id, agent_name, status, output FROM helix.runs WHERE session_id = %s",
        session_id,
    )


async def test_card_plain_run_and_bad_input(database_url, tmp_path):
    with running(database_url, tmp_path) as server:
        # The card: served under the agent's path, skills from its tools, bearer auth.
        card = httpx.get(f"{server.agent('reader')}/.well-known/agent-card.json", headers=AUTH)
        body = card.json()
        assert body["name"] == "reader" and body["description"] == "Reads about a topic."
        assert [s["id"] for s in body["skills"]] == ["slow"]
        assert body["supportedInterfaces"][0]["url"] == server.agent("reader")
        assert body["capabilities"]["streaming"] is True
        assert "bearer" in body["securitySchemes"]
        # The same bearer auth as the rest of the server, on the card and on the endpoint.
        assert httpx.get(f"{server.agent('reader')}/.well-known/agent-card.json").status_code == 401
        assert httpx.post(server.agent("echo"), json={}).status_code == 401
        # Every route is in the OpenAPI document.
        paths = httpx.get(f"{server.url}/openapi.json").json()["paths"]
        assert "post" in paths["/a2a/{agent}"]
        assert "get" in paths["/a2a/{agent}/.well-known/agent-card.json"]

        async with a2a(server.agent("echo"), streaming=False) as client:
            [event] = [
                e async for e in client.send_message(SendMessageRequest(message=user_message("hi")))
            ]
            task = event.task
            assert task.status.state == TaskState.TASK_STATE_COMPLETED
            assert response_text(task) == "echo: hi"
            assert [get_text_parts(m.parts) for m in task.history] == [["hi"], ["echo: hi"]]
            # The task is the helix run, its context the session.
            [(run_id, agent, status, output)] = runs_of(database_url, task.context_id)
            assert (run_id, agent, status, output) == (task.id, "echo", "completed", "echo: hi")
            got = await client.get_task(GetTaskRequest(id=task.id))
            assert got.status.state == TaskState.TASK_STATE_COMPLETED and got.id == task.id
            # A new message in the same context is the session's next turn.
            again = user_message("more", context_id=task.context_id)
            [event] = [e async for e in client.send_message(SendMessageRequest(message=again))]
            assert response_text(event.task) == "echo: more"
            assert len(runs_of(database_url, task.context_id)) == 2
            # The same message id again is the same task, not another run.
            [event2] = [e async for e in client.send_message(SendMessageRequest(message=again))]
            assert event2.task.id == event.task.id
            assert len(runs_of(database_url, task.context_id)) == 2
            listed = await client.list_tasks(ListTasksRequest(context_id=task.context_id))
            assert [t.id for t in listed.tasks] == [task.id, event.task.id]
            # Bad input: the protocol's own errors, never a server error.
            with pytest.raises(TaskNotFoundError):
                await client.get_task(GetTaskRequest(id="run_nope"))
            with pytest.raises(UnsupportedOperationError):
                follow_up = user_message("and?", task_id=task.id)
                [_ async for _ in client.send_message(SendMessageRequest(message=follow_up))]
            with pytest.raises(InvalidParamsError):
                empty = Message(message_id="m-empty", role=Role.ROLE_USER)
                [_ async for _ in client.send_message(SendMessageRequest(message=empty))]
            with pytest.raises(TaskNotCancelableError):
                await client.cancel_task(CancelTaskRequest(id=task.id))
        # Raw JSON-RPC: garbage and unknown methods get JSON-RPC errors, an unknown agent 404.
        raw = httpx.post(server.agent("echo"), content=b"{nope", headers={**AUTH, **VERSION})
        assert raw.status_code == 200 and raw.json()["error"]["code"] == -32700
        raw = httpx.post(
            server.agent("echo"),
            json={"jsonrpc": "2.0", "id": 1, "method": "Nope", "params": {}},
            headers={**AUTH, **VERSION},
        )
        assert raw.json()["error"]["code"] == -32601
        raw = httpx.post(
            server.agent("echo"),
            json={"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {"message": 5}},
            headers={**AUTH, **VERSION},
        )
        assert raw.status_code == 200 and raw.json()["error"]["code"] == -32602
        raw = httpx.post(
            server.agent("ghost"),
            json={"jsonrpc": "2.0", "id": 3, "method": "GetTask", "params": {"id": "x"}},
            headers={**AUTH, **VERSION},
        )
        assert raw.status_code == 404 and "ghost" in raw.json()["error"]["message"]
        # The body limits hold: an oversized body is refused before the handler.
        huge = httpx.post(
            server.agent("echo"),
            content=b'{"x": "' + b"a" * 2_000_000 + b'"}',
            headers={**AUTH, **VERSION, "Content-Type": "application/json"},
        )
        assert huge.status_code == 413


async def test_tool_call_stream_and_reconnect(database_url, tmp_path):
    with running(database_url, tmp_path) as server:
        async with a2a(server.agent("reader")) as client:
            events = client.send_message(SendMessageRequest(message=user_message("owls")))
            first = await anext(events)
            assert first.HasField("task") and first.task.status.state in (
                TaskState.TASK_STATE_SUBMITTED,
                TaskState.TASK_STATE_WORKING,
            )
            task_id = first.task.id
            # The tool call shows as a working status with the call as data.
            tool_start = None
            async for event in events:
                if event.HasField("status_update") and event.status_update.status.HasField(
                    "message"
                ):
                    [data] = get_data_parts(event.status_update.status.message.parts)
                    if data["type"] == "tool_start":
                        tool_start = data
                        break
            assert tool_start is not None and tool_start["tool_name"] == "slow"
            await events.aclose()  # the client goes away mid-run
        wait_for(lambda: lines(tmp_path, "slow_owls.log"))
        async with a2a(server.agent("reader")) as client:
            resumed = client.subscribe(SubscribeToTaskRequest(id=task_id))
            snapshot = await anext(resumed)
            assert snapshot.task.id == task_id
            assert snapshot.task.status.state == TaskState.TASK_STATE_WORKING
            release(tmp_path, "owls")
            rest = [e async for e in resumed]
        states = [state_of(e) for e in rest if state_of(e) is not None]
        assert states[-1] == TaskState.TASK_STATE_COMPLETED
        assert states.count(TaskState.TASK_STATE_COMPLETED) == 1
        [final] = [
            e.artifact_update
            for e in rest
            if e.HasField("artifact_update") and e.artifact_update.last_chunk
        ]
        assert get_text_parts(final.artifact.parts) == ["owls: read about owls"]
        # The tool ran once; the events after the reconnect do not repeat its start.
        assert lines(tmp_path, "slow_owls.log") == ["x"]
        starts = [
            e
            for e in rest
            if e.HasField("status_update")
            and e.status_update.status.HasField("message")
            and get_data_parts(e.status_update.status.message.parts)[0]["type"] == "tool_start"
        ]
        assert starts == []


async def test_approval_round_trip_and_cancel(database_url, tmp_path):
    with running(database_url, tmp_path) as server:
        async with a2a(server.agent("guarded")) as client:
            events = [
                e
                async for e in client.send_message(
                    SendMessageRequest(message=user_message("a.txt"))
                )
            ]
            waiting = events[-1].status_update
            assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            [data] = get_data_parts(waiting.status.message.parts)
            [pending] = data["pending"]
            assert (pending["tool_name"], pending["kind"]) == ("delete_file", "approval")
            task_id = waiting.task_id
            got = await client.get_task(GetTaskRequest(id=task_id))
            assert got.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            assert lines(tmp_path, "delete.log") == []
            # A wrong answer is a clear error; the call still waits.
            with pytest.raises(InvalidParamsError):
                wrong = user_message("perhaps", task_id=task_id)
                [_ async for _ in client.send_message(SendMessageRequest(message=wrong))]
            answer = user_message({"approved": True, "reason": "fine"}, task_id=task_id)
            rest = [e async for e in client.send_message(SendMessageRequest(message=answer))]
            assert rest[0].task.id == task_id  # the same task goes on
            assert state_of(rest[-1]) == TaskState.TASK_STATE_COMPLETED
            done = await client.get_task(GetTaskRequest(id=task_id))
            assert response_text(done) == "guarded: deleted a.txt"
            assert lines(tmp_path, "delete.log") == ["a.txt"]
            [(answered_by,)] = sql(
                database_url,
                "SELECT answered_by FROM helix.tool_calls WHERE run_id = %s",
                task_id,
            )
            assert answered_by == "A2A"
            # A "no" in plain text denies; cancel aborts a waiting task.
            request = SendMessageRequest(
                message=user_message("b.txt"),
                configuration=SendMessageConfiguration(return_immediately=False),
            )
            [_ async for _ in client.send_message(request)]
            [(other, *_)] = [
                r
                for r in sql(
                    database_url,
                    "SELECT run_id FROM helix.runs WHERE agent_name = 'guarded' AND status = 'waiting'",
                )
            ]
            canceled = await client.cancel_task(CancelTaskRequest(id=other))
            assert canceled.status.state == TaskState.TASK_STATE_CANCELED
            [(status,)] = sql(
                database_url, "SELECT status FROM helix.runs WHERE run_id = %s", other
            )
            assert status == "aborted"
            assert lines(tmp_path, "delete.log") == ["a.txt"]


async def test_server_sigkill_mid_run_resumes_and_finishes_once(database_url, tmp_path):
    server = Server(database_url, tmp_path)
    try:
        server.start()
        async with a2a(server.agent("reader")) as client:
            events = client.send_message(SendMessageRequest(message=user_message("moles")))
            first = await anext(events)
            task_id, context_id = first.task.id, first.task.context_id
            wait_for(lambda: lines(tmp_path, "slow_moles.log"))
            server.kill()  # mid-run: the tool is running
            with pytest.raises(A2AClientError):
                [_ async for _ in events]
        release(tmp_path, "moles")
        server.start()  # the same executor: DBOS recovers the run
        async with a2a(server.agent("reader")) as client:
            resumed = [e async for e in client.subscribe(SubscribeToTaskRequest(id=task_id))]
            final = await client.get_task(GetTaskRequest(id=task_id))
        assert resumed[0].task.id == task_id
        assert state_of(resumed[-1]) == TaskState.TASK_STATE_COMPLETED
        assert final.status.state == TaskState.TASK_STATE_COMPLETED
        assert response_text(final) == "moles: read about moles"
        # One run, one end: the run finished once.
        [(run_id, _, status, _)] = runs_of(database_url, context_id)
        assert (run_id, status) == (task_id, "completed")
        [(ends,)] = sql(
            database_url,
            "SELECT count(*) FROM helix.stream_chunks WHERE run_id = %s AND type = 'run_completed'",
            task_id,
        )
        assert ends == 1
        assert len(lines(tmp_path, "llm_reader.log")) == 2
    finally:
        server.stop()


@pytest.fixture
def child_database_url(embedded_dir, migrated_template) -> Iterator[str]:
    with _new_database(embedded_dir, migrated_template) as url:
        yield url


async def test_helix_parent_delegates_to_a2a_child_across_a_sigkill(
    database_url, child_database_url, tmp_path
):
    child = Server(child_database_url, tmp_path).start()
    parent = Server(database_url, tmp_path, child_url=child.agent("reader"))
    try:
        parent.start()
        async with a2a(parent.agent("lead"), streaming=False) as client:
            request = SendMessageRequest(
                message=user_message("bats"),
                configuration=SendMessageConfiguration(return_immediately=True),
            )
            [event] = [e async for e in client.send_message(request)]
            task_id, context_id = event.task.id, event.task.context_id
        wait_for(lambda: lines(tmp_path, "slow_bats.log"))
        parent.kill()  # mid-delegation: the child's tool runs
        parent.start()
        release(tmp_path, "bats")
        async with a2a(parent.agent("lead")) as client:
            [_ async for _ in client.subscribe(SubscribeToTaskRequest(id=task_id))]
            final = await client.get_task(GetTaskRequest(id=task_id))
        assert final.status.state == TaskState.TASK_STATE_COMPLETED
        assert response_text(final) == "lead got: bats: read about bats"
        # The child's task ran once, in the deterministic context, started once.
        child_session = remote_session_id(context_id, "r1")
        [(child_run, agent, status, output)] = runs_of(child_database_url, child_session)
        assert (agent, status, output) == ("reader", "completed", "bats: read about bats")
        assert lines(tmp_path, "slow_bats.log") == ["x"]
        [(key_run,)] = sql(
            child_database_url,
            "SELECT run_id FROM helix.start_keys WHERE idempotency_key = %s",
            f"a2a:reader:{remote_start_key(context_id, 'r1')}",
        )
        assert key_run == child_run
        [(rrid, rstatus)] = sql(
            database_url,
            "SELECT remote_run_id, status FROM helix.remote_children WHERE parent_session_id = %s",
            context_id,
        )
        assert (rrid, rstatus) == (child_run, "completed")
        # Canceling the parent cancels the A2A child's task (the call's control loop).
        async with a2a(parent.agent("lead"), streaming=False) as client:
            request = SendMessageRequest(
                message=user_message("cats"),
                configuration=SendMessageConfiguration(return_immediately=True),
            )
            [event] = [e async for e in client.send_message(request)]
            wait_for(lambda: lines(tmp_path, "slow_cats.log"))
            canceled = await client.cancel_task(CancelTaskRequest(id=event.task.id))
        assert canceled.status.state == TaskState.TASK_STATE_CANCELED
        cats_session = remote_session_id(event.task.context_id, "r1")
        wait_for(lambda: [r[2] for r in runs_of(child_database_url, cats_session)] == ["aborted"])
    finally:
        parent.stop()
        child.stop()


def test_an_abort_while_the_a2a_task_starts_still_cancels_it(
    database_url, child_database_url, tmp_path
):
    """The parent is aborted after its start step sent the A2A message and before the
    child's task exists: the abort finds no task id to cancel, so the start step must."""
    child = Server(child_database_url, tmp_path).start()
    parent = Server(database_url, tmp_path, child_url=child.agent("reader"))
    try:
        parent.start()
        with HelixClient(parent.url, token=TOKEN) as client:
            run = client.start("lead", "held-owls")
            wait_for(lambda: lines(tmp_path, "start_held.log"))
            client.abort(run.session_id, reason="enough")
            wait_for(lambda: runs_of(database_url, run.session_id)[0][2] == "aborted")
            owls = remote_session_id(run.session_id, "r1")
            assert runs_of(child_database_url, owls) == [], "the start is still held"
            release(tmp_path, "start")
            # Uncancelled, the task would wait in `slow` for a release that never comes.
            wait_for(lambda: [r[2] for r in runs_of(child_database_url, owls)] == ["aborted"], 30)
            assert client.status(run.session_id).last_run.status == "aborted"
    finally:
        parent.stop()
        child.stop()


def test_the_example_runs(database_url, tmp_path):
    """examples/a2a_agents.py (included whole in docs/protocols/a2a.md) as a user runs it."""
    example = Path(__file__).resolve().parent.parent / "examples" / "a2a_agents.py"
    done = forkserver.run(
        [sys.executable, str(example)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env_for(database_url),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    assert printed[0] == "task TASK_STATE_WORKING"
    assert printed[-2:] == [
        "answer: lead: researcher: owls are nocturnal",
        "status TASK_STATE_COMPLETED",
    ]
    [(status,)] = sql(
        database_url,
        "SELECT rc.status FROM helix.remote_children rc JOIN helix.runs r "
        "ON r.run_id = rc.remote_run_id WHERE r.agent_name = 'researcher'",
    )
    assert status == "completed"


def test_the_page_runs_as_pasted(database_url, tmp_path):
    """docs/protocols/a2a.md: its Python blocks run as pasted, it includes the example whole,
    and its mapping table names every A2A state helix uses."""
    page = section("A2A")
    blocks = code_blocks(page, "python")
    assert blocks[-1].strip() == '--8<-- "examples/a2a_agents.py"'
    check = "\nprint(lead.tools[0].protocol, lead.tools[0].url, callable(connect))\n"
    done = run_pasted("\n".join(blocks[:-1]) + check, database_url, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["a2a", "https://agents.example.com/a2a/translator", "True"]
    mapping = section("Helix concepts as A2A fields")
    for state in ("WORKING", "INPUT_REQUIRED", "COMPLETED", "FAILED", "CANCELED"):
        assert f"TASK_STATE_{state}" in mapping


async def test_a2a_streams_count_against_the_stream_caps(helix, make_agent, mock_llm):
    gate = threading.Event()

    @tool
    async def wait_here() -> str:
        """Blocks until the test lets it go."""
        while not gate.is_set():
            await asyncio.sleep(0.05)
        return "let go"

    agent = make_agent(tools=[wait_here])
    mock_llm.add_responses(
        {"type": "tool_calls", "tool_calls": [{"id": "w1", "name": "wait_here", "arguments": {}}]},
        {"type": "text", "content": "done"},
        agent=agent.name,
    )
    app = create_app(helix, allow_unauthenticated=True, max_streams_per_session=1)
    with serve(app) as url:
        async with httpx.AsyncClient(timeout=60) as http:
            factory = ClientFactory(ClientConfig(streaming=True, httpx_client=http))
            client = await factory.create_from_url(f"{url}/a2a/{agent.name}")
            events = client.send_message(SendMessageRequest(message=user_message("go")))
            first = await anext(events)  # the stream holds the session's one slot
            with pytest.raises(InvalidRequestError, match="retry later"):
                [_ async for _ in client.subscribe(SubscribeToTaskRequest(id=first.task.id))]
            gate.set()
            rest = [e async for e in events]
            assert state_of(rest[-1]) == TaskState.TASK_STATE_COMPLETED
            wait_for(lambda: helix_streams_open(app) == 0)
            again = [e async for e in client.subscribe(SubscribeToTaskRequest(id=first.task.id))]
            assert again[0].task.status.state == TaskState.TASK_STATE_COMPLETED
            await client.close()


def helix_streams_open(app) -> int:
    return int(app.state.helix_server.streams.open)
