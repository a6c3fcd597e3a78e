"""`HelixClient` and `AsyncHelixClient` over a real uvicorn serving create_app(helix), the
seed 002 chat routes and `/workspaces`, and keyed starts (issue 32)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import forkserver
import httpx
import pytest
from docs_text import code_blocks, section
from helpers import calls as llm_calls
from helpers import sql, text
from live_server import serve
from tcp_proxy import CuttableProxy

from helix_dbos import AsyncHelixClient, HelixClient, tool
from helix_dbos.api.models import RunStarted, StatusResponse
from helix_dbos.client import calls
from helix_dbos.client.errors import (
    AuthenticationError,
    ConflictError,
    InternalServerError,
    NotFoundError,
    RateLimitError,
    UnprocessableEntityError,
    status_error,
)
from helix_dbos.client.sse import SSEDecoder
from helix_dbos.server import bearer_token, create_app

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def base_url(helix):
    with serve(create_app(helix, allow_unauthenticated=True, keepalive_seconds=0.3)) as url:
        yield url


@pytest.fixture(scope="module")
def secured_url(helix):
    with serve(create_app(helix, authenticate=bearer_token("s3cret-token"))) as url:
        yield url


def approval_agent(make_agent, mock_llm, ran: list[str]):
    @tool(require_approval=True)
    def delete_file(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return f"deleted {path}"

    agent = make_agent(tools=[delete_file])
    mock_llm.add_responses(
        llm_calls(("d1", "delete_file", {"path": "/tmp/x"})), text("Deleted."), agent=agent.name
    )
    return agent


def wait_for_pending(client: HelixClient, session_id: str, timeout: float = 60.0) -> StatusResponse:
    """The session's status once its run waits (a deadline, not a count of polls: each
    poll is an HTTP round trip, slow on a loaded machine)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = client.status(session_id)
        if status.current_run and status.current_run.status == "waiting":
            return status
        time.sleep(0.05)
    raise AssertionError("the run never waited")


def test_sync_client_starts_streams_answers_and_reads(base_url, make_agent, mock_llm):
    ran: list[str] = []
    agent = approval_agent(make_agent, mock_llm, ran)
    with HelixClient(base_url) as client:
        run = client.start(agent.name, "clean up")
        assert isinstance(run, RunStarted) and run.workflow_id == f"helix-{run.run_id}"
        status = wait_for_pending(client, run.session_id)
        [pending] = status.pending_tool_calls
        assert (pending.tool_call_id, pending.kind) == ("d1", "approval")
        answer = client.approve(run.session_id, "d1", answered_by="ops")
        assert answer.accepted and answer.kind == "approval-response"
        chunks = list(client.stream(run.session_id, run_id=run.run_id))
        types = [c.type for c in chunks]
        assert types[0] == "run_started" and types[-1] == "run_completed", types
        assert "tool_approval_request" in types
        assert [c.seq for c in chunks] == sorted({c.seq for c in chunks})
        assert ran == ["/tmp/x"]
        final = client.wait(run.session_id, run.run_id)
        assert (final.status, final.output) == ("completed", "Deleted.")
        messages = client.get_messages(run.session_id)
        assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
        usage = client.get_usage(run.session_id)
        assert usage.totals.llm_calls == 2
        runs = client.list_runs(session_id=run.session_id)
        assert [r.run_id for r in runs] == [run.run_id] and runs[0].status == "completed"
        assert any(a.tool_call_id == "d1" and a.answered_by == "ops" for a in client.answered(50))
        assert client.workspaces() == []
        # A second turn of the same session, then a resume after it.
        mock_llm.add_response(text("Again."), agent=agent.name)
        second = client.resume(run.session_id, "once more")
        assert client.wait(run.session_id, second.run_id).output == "Again."


async def test_async_client_reads_checkpoints_and_forks(base_url, make_agent, mock_llm):
    """Time travel over the client: the waiting run's head checkpoint, then a fork from
    it whose pending call is paired, continued by a resume (docs/time-travel.md)."""
    ran: list[str] = []
    agent = approval_agent(make_agent, mock_llm, ran)
    async with AsyncHelixClient(base_url) as client:
        run = await client.start(agent.name, "clean up")
        for _ in range(400):
            cps = await client.get_checkpoints(run.session_id)
            if cps:
                break
            await asyncio.sleep(0.05)
        assert [(c.kind, c.step) for c in cps] == [("head", 1)]
        view = await client.get_checkpoint(run.session_id, cps[0].checkpoint_id)
        assert [c.id for c in view.messages[-1].tool_calls or []] == ["d1"]
        forked = await client.fork(run.session_id, cps[0].checkpoint_id)
        assert forked.forked_from_session_id == run.session_id
        assert forked.forked_from_checkpoint_id == cps[0].checkpoint_id
        fork_messages = await client.get_messages(forked.session_id)
        assert [m.role for m in fork_messages] == ["user", "assistant", "tool"]
        assert fork_messages[-1].is_error, "the unanswered call is paired in the branch"
        with pytest.raises(NotFoundError):
            await client.get_checkpoint(run.session_id, "run_missing:1")
        with pytest.raises(NotFoundError):
            await client.fork(run.session_id, "run_missing:1")
        # The model is asked again with the branch's history (its next scripted reply).
        again = await client.resume(forked.session_id)
        assert (await client.wait(forked.session_id, again.run_id)).status == "completed"
        roles = [m.role for m in await client.get_messages(forked.session_id)]
        assert roles == ["user", "assistant", "tool", "assistant"]
        await client.abort(run.session_id)
    assert ran == []


async def test_async_client_chat_and_errors(base_url, make_agent, mock_llm):
    agent = make_agent()
    mock_llm.add_responses(text("Hello!"), agent=agent.name)
    async with AsyncHelixClient(base_url) as client:
        reply = await client.chat("ctx-" + agent.name, "hi", agent=agent.name)
        assert (reply.status, reply.response) == ("completed", "Hello!")
        with pytest.raises(NotFoundError) as missing:
            await client.status("no-such-session")
        assert missing.value.status_code == 404 and "no-such-session" in missing.value.detail
        with pytest.raises(NotFoundError):
            await client.start("no-such-agent", "hi")
        with pytest.raises(ConflictError) as idle:
            await client.interrupt("ctx-" + agent.name)
        assert idle.value.status_code == 409 and "no run in progress" in idle.value.detail
        # NUL bytes cannot be stored in PostgreSQL text: a 422 naming the field, nothing run.
        with pytest.raises(UnprocessableEntityError) as nul:
            await client.start(agent.name, "bad\x00input")
        assert "input" in nul.value.detail
        with pytest.raises(UnprocessableEntityError):
            await client.status("bad\x00id")
        chunks = [c async for c in client.stream("ctx-" + agent.name, run_id=reply.run_id)]
        assert chunks[-1].type == "run_completed"


def test_a_token_is_sent_as_bearer_and_a_wrong_one_is_401(secured_url, make_agent, mock_llm):
    agent = make_agent()
    mock_llm.add_responses(text("ok"), agent=agent.name)
    with HelixClient(secured_url) as anonymous, pytest.raises(AuthenticationError) as refused:
        anonymous.workspaces()
    assert refused.value.status_code == 401
    with HelixClient(secured_url, token="wrong") as wrong, pytest.raises(AuthenticationError):
        wrong.start(agent.name, "hi")
    with HelixClient(secured_url, token="s3cret-token") as client:
        run = client.start(agent.name, "hi")
        assert client.wait(run.session_id, run.run_id).output == "ok"


def test_stream_resumes_after_a_dropped_connection(base_url, make_agent, mock_llm):
    """The connection is cut (and refused for a while) mid-run; the client reconnects
    with Last-Event-ID and delivers every chunk exactly once, in order."""
    release = threading.Event()

    @tool
    async def gate() -> str:
        """Waits for the test."""
        while not release.is_set():
            await asyncio.sleep(0.02)
        return "open"

    agent = make_agent(tools=[gate])
    mock_llm.add_responses(llm_calls(("g", "gate", {})), text("after the gate"), agent=agent.name)
    port = int(base_url.rsplit(":", 1)[1])
    proxy = CuttableProxy(f"postgresql://u@127.0.0.1:{port}/unused")
    try:
        streams: list[str] = []
        http = httpx.Client(
            base_url=f"http://127.0.0.1:{proxy.port}",
            timeout=30,
            event_hooks={"request": [lambda r: streams.append(r.headers.get("last-event-id", ""))]},
        )
        with (
            http,
            HelixClient(http.base_url.__str__(), retry_delay=0.1, http_client=http) as client,
        ):
            run = client.start(agent.name, "go")
            seen = []
            for chunk in client.stream(run.session_id, run_id=run.run_id):
                seen.append(chunk)
                if chunk.type == "tool_start" and not release.is_set():
                    proxy.cut()  # the open stream drops; reconnections are refused
                    release.set()
                    threading.Timer(0.6, proxy.restore).start()
        with HelixClient(base_url) as direct:
            everything = list(direct.stream(run.session_id, run_id=run.run_id))
    finally:
        proxy.close()
    assert release.is_set(), "the run never reached its tool"
    resumed = [h for h in streams[1:] if h]  # streams[0] is the start
    assert resumed and int(resumed[-1]) in {c.seq for c in seen}, streams
    assert [c.seq for c in seen] == [c.seq for c in everything]
    assert seen[-1].type == "run_completed"
    assert any(c.type == "tool_end" for c in seen), "chunks after the cut arrived"


def test_keyed_start_starts_once(base_url, make_agent, mock_llm, database_url):
    agent = make_agent()
    other = make_agent()
    mock_llm.add_responses(text("once"), agent=agent.name)
    with HelixClient(base_url) as client:
        first = client.start(
            agent.name, "hi", session_id=f"keyed-{agent.name}", idempotency_key=agent.name
        )
        again = client.start(
            agent.name, "hi", session_id=f"keyed-{agent.name}", idempotency_key=agent.name
        )
        assert again == first
        assert client.wait(first.session_id, first.run_id).output == "once"
        after_end = client.start(agent.name, "hi", idempotency_key=agent.name)
        assert after_end == first, "a key answers its run after the run ended too"
        with pytest.raises(ConflictError):
            client.start(other.name, "hi", idempotency_key=agent.name)
        unkeyed = client.start(agent.name, "hi", idempotency_key=f"{agent.name}-2")
        assert unkeyed.session_id != first.session_id
    [(runs,)] = sql(
        database_url, "SELECT count(*) FROM helix.runs WHERE session_id = %s", first.session_id
    )
    assert runs == 1


async def test_chat_session_routes_answer_as_the_executor_routes(base_url, make_agent, mock_llm):
    ran: list[str] = []
    agent = approval_agent(make_agent, mock_llm, ran)
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        run = (await http.post("/start", json={"agent": agent.name, "input": "x"})).json()
        sid = run["session_id"]
        for _ in range(400):
            status = (await http.get("/status", params={"session_id": sid})).json()
            if status["pending_tool_calls"]:
                break
            await asyncio.sleep(0.05)
        bad = await http.post(
            f"/chat/{sid}/submit-tool-result",
            json={"tool_call_id": "d1", "kind": "approval-response"},
        )
        assert bad.status_code == 422 and "approved" in bad.json()["detail"]
        answered = await http.post(
            f"/chat/{sid}/submit-tool-result",
            json={"tool_call_id": "d1", "kind": "approval-response", "approved": True},
        )
        assert answered.status_code == 200, answered.text
        assert answered.json()["session_id"] == sid
        async with http.stream("GET", f"/chat/{sid}/stream", params={"run_id": run["run_id"]}) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            body = "".join([line + "\n" async for line in r.aiter_lines()])
        sse = (await http.get("/sse", params={"session_id": sid, "run_id": run["run_id"]})).text
        ids = [line for line in body.splitlines() if line.startswith("id: ")]
        assert ids and ids == [line for line in sse.splitlines() if line.startswith("id: ")]
        assert "event: run_completed" in body and "event: end" in body
        idle = await http.post(f"/chat/{sid}/interrupt")
        assert idle.status_code == 409, idle.text
        gone = await http.post("/chat/no-such-session/abort", json={"reason": "x"})
        assert gone.status_code == 404
        assert (await http.get("/workspaces")).json() == []
        paths = (await http.get("/openapi.json")).json()["paths"]
    for path in ("stream", "submit-tool-result", "interrupt", "abort"):
        assert f"/chat/{{session_id}}/{path}" in paths
    assert "/workspaces" in paths
    assert ran == ["/tmp/x"]


async def test_chat_interrupt_and_abort_reach_a_live_run(base_url, make_agent, mock_llm):
    ran: list[str] = []
    agent = approval_agent(make_agent, mock_llm, ran)
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        run = (await http.post("/start", json={"agent": agent.name, "input": "x"})).json()
        sid = run["session_id"]
        for _ in range(400):
            status = (await http.get("/status", params={"session_id": sid})).json()
            if status["pending_tool_calls"]:
                break
            await asyncio.sleep(0.05)
        stopped = await http.post(f"/chat/{sid}/abort", json={"reason": "enough"})
        assert stopped.status_code == 200, stopped.text
        assert stopped.json()["action"] == "aborted" and stopped.json()["run_id"] == run["run_id"]
    async with AsyncHelixClient(base_url) as client:
        last = (await client.status(sid)).last_run
        assert last is not None and last.status == "aborted"
    assert ran == []


def test_the_client_covers_every_route(base_url):
    """Every API route of the server has a client call (the chat routes of seed 002 are
    the executor routes under other paths: the client uses the executor ones)."""
    with HelixClient(base_url) as client:
        spec = client._http.get("/openapi.json").json()
    served = {
        (method.upper(), path)
        for path, operations in spec["paths"].items()
        for method in operations
        if path not in ("/inbox", "/timeline")  # pages for people, not an API
        and not path.startswith("/a2a/")  # A2A: its own protocol's clients (test_a2a.py)
        and not path.startswith("/ai-sdk/")  # the AI SDK's own protocol (its own client)
        and not path.startswith(
            "/ag-ui/"
        )  # served to AG-UI's own clients (server/protocols/ag_ui.py)
    }
    aliases = {
        ("GET", "/chat/{session_id}/stream"),
        ("POST", "/chat/{session_id}/submit-tool-result"),
        ("POST", "/chat/{session_id}/interrupt"),
        ("POST", "/chat/{session_id}/abort"),
    }
    made = {
        ("POST", "/start"),
        ("GET", "/sse"),  # HelixClient.stream
    }
    samples = [
        calls.resume("s", None),
        calls.status("s"),
        calls.control("interrupt", "s", None),
        calls.control("abort", "s", None),
        calls.submit_tool_result(
            session_id="s", tool_call_id="t", kind="approval-response", approved=True
        ),
        calls.list_runs(None, None, 1),
        calls.messages("{session_id}"),
        calls.part("{session_id}", "{sha256}"),
        calls.usage("{session_id}", False),
        calls.answered(1),
        calls.workspaces(),
        calls.queue("s"),
        calls.cancel_queued("s", "m"),
        calls.checkpoints("{session_id}"),
        calls.checkpoint("{session_id}", "{checkpoint_id}"),
        calls.fork("{session_id}", at="a"),
        calls.chat(context_id="c", message="m"),
        calls.chat_invoke(context_id="c"),
        calls.add_ai_message(context_id="c"),
        calls.schedules(None),
        calls.create_schedule(agent="a", cron="* * * * *"),
        calls.schedule("{name}"),
        calls.schedule_action("{name}", "pause"),
        calls.schedule_action("{name}", "resume"),
        calls.delete_schedule("{name}"),
        calls.backfill_schedule("{name}", start="2026-01-01T00:00:00Z"),
        calls.trigger_schedule("{name}"),
        calls.schedule_firings("{name}", 1),
    ]
    made |= {(c.method, c.path.replace("%7B", "{").replace("%7D", "}")) for c in samples}
    assert served - aliases <= made, sorted(served - aliases - made)


@pytest.mark.crash
def test_the_client_page_runs_against_the_example_server(database_url, tmp_path):
    """docs/client.md's two programs, as pasted, against examples/server.py."""
    port = free_port()
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("HELIX_", "ANTHROPIC_", "OPENAI_"))
    }
    env |= {"HELIX_DATABASE_URL": database_url, "PORT": str(port)}
    server = forkserver.Popen(
        [sys.executable, str(REPO / "examples" / "server.py")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        with HelixClient(url, max_retries=0, timeout=2) as probe:
            for _ in range(600):
                try:
                    probe.workspaces()
                    break
                except Exception:
                    assert server.poll() is None, "examples/server.py exited"
                    time.sleep(0.2)
        sync_program, async_program = code_blocks(section("Python client"), "python")[:2]
        outputs = []
        for name, program in (("sync.py", sync_program), ("async.py", async_program)):
            script = tmp_path / name
            script.write_text(program)
            done = forkserver.run(
                [sys.executable, str(script)],
                capture_output=True,
                text=True,
                timeout=120,
                env={**env, "HELIX_URL": url},
            )
            assert done.returncode == 0, done.stderr
            outputs.append(done.stdout.splitlines())
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert outputs[0] == ["completed The clean-up is done."]
    printed = outputs[1]
    assert printed[0] == "run_started" and printed[-1] == "run_completed", printed
    assert printed.index("tool_approval_request") < printed.index("tool_end")
    assert "run_resumed" in printed
    assert "prints `completed The clean-up is done.`" in section("Python client")


def test_the_sse_decoder_follows_the_event_stream_rules():
    decoder = SSEDecoder()
    lines = [": keep-alive", "", "id: 7", "event: text_delta", 'data: {"a":', "data:1}", ""]
    events = [e for e in (decoder.feed(line) for line in lines) if e is not None]
    assert len(events) == 1
    assert (events[0].id, events[0].event, events[0].data) == ("7", "text_delta", '{"a":\n1}')
    assert decoder.feed("data: x") is None and decoder.feed("").event == "message"


def test_error_answers_map_to_exceptions_with_the_servers_detail():
    crashed = status_error(502, None, "<html>bad gateway</html>")
    assert isinstance(crashed, InternalServerError) and crashed.detail == "<html>bad gateway</html>"
    limited = status_error(429, {"detail": "slow down"}, "")
    assert isinstance(limited, RateLimitError) and str(limited) == "HTTP 429: slow down"


def test_concurrent_keyed_starts_open_one_run(base_url, make_agent, mock_llm, database_url):
    """Five clients race with one key (a replayed step and its retry, say): one run."""
    agent = make_agent()
    mock_llm.add_responses(text("raced"), agent=agent.name)
    key = f"race-{agent.name}"
    barrier = threading.Barrier(5)
    started: list[RunStarted] = []

    def race() -> None:
        with HelixClient(base_url) as client:
            barrier.wait()
            started.append(client.start(agent.name, "go", idempotency_key=key))

    threads = [threading.Thread(target=race) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(started) == 5 and len({s.run_id for s in started}) == 1
    [(runs,)] = sql(
        database_url, "SELECT count(*) FROM helix.runs WHERE session_id = %s", started[0].session_id
    )
    assert runs == 1
    with HelixClient(base_url) as client:
        assert client.wait(started[0].session_id, started[0].run_id).output == "raced"


async def test_clients_share_one_verifying_tls_context():
    """Each client used to build its own TLS context (reading the CA bundle, ~30 ms of
    CPU): the CLI and every remote call paid it. They now share one, which still checks
    certificates and host names; a client given its own `http_client` keeps it."""
    import ssl  # noqa: PLC0415

    from helix_dbos.client.tls import shared_ssl_context  # noqa: PLC0415

    context = shared_ssl_context()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.cert_store_stats()["x509_ca"] > 0, "no CA certificates loaded"
    with HelixClient("https://a.example") as one, HelixClient("https://b.example") as two:
        pools = [client._http._transport._pool for client in (one, two)]
        assert all(pool._ssl_context is context for pool in pools)
    async with AsyncHelixClient("https://c.example") as three:
        assert three._http._transport._pool._ssl_context is context
    own = httpx.Client()
    with HelixClient("https://d.example", http_client=own) as mine:
        assert mine._http is own and own._transport._pool._ssl_context is not context
