"""The HTTP API (issue 5): a real uvicorn on 127.0.0.1 serving create_app(helix)."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import AsyncIterator

import httpx
import pytest
from helpers import calls, sql
from live_server import serve

from helix_dbos import tool
from helix_dbos.server import bearer_token, create_app


def text(content: str) -> dict:
    return {"type": "text", "content": content}


@pytest.fixture(scope="module")
def base_url(helix):
    with serve(create_app(helix, allow_unauthenticated=True, keepalive_seconds=0.3)) as url:
        yield url


@pytest.fixture
async def client(base_url) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as c:
        yield c


async def read_sse(
    client: httpx.AsyncClient, params: dict, headers: dict | None = None
) -> tuple[list[dict], list[str]]:
    """Read a whole SSE response: (events with id/event/data, comment lines)."""
    events, comments, current = [], [], {}
    async with client.stream("GET", "/sse", params=params, headers=headers or {}) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if line.startswith(":"):
                comments.append(line)
            elif line == "":
                if "event" in current:
                    events.append(current)
                current = {}
            else:
                field, _, value = line.partition(": ")
                current[field] = json.loads(value) if field == "data" else value
    return events, comments


async def wait_for_pending(client: httpx.AsyncClient, session_id: str) -> dict:
    for _ in range(400):
        status = (await client.get("/status", params={"session_id": session_id})).json()
        pending = [p for p in status.get("pending_tool_calls", []) if not p["answered"]]
        if status.get("current_run") and status["current_run"]["status"] == "waiting" and pending:
            return status
        await asyncio.sleep(0.05)
    raise AssertionError("the run never started waiting")


def make_deleter(ran: list[str]):
    @tool(require_approval=True)
    def delete_file(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return f"deleted {path}"

    return delete_file


# --- construction and auth ------------------------------------------------------


def test_create_app_fails_closed_without_an_auth_decision(helix):
    with pytest.raises(ValueError, match="authenticate=.*allow_unauthenticated=True"):
        create_app(helix)
    with pytest.raises(ValueError, match="default_agent 'nope' is not registered"):
        create_app(helix, allow_unauthenticated=True, default_agent="nope")


async def test_authenticate_hook_guards_every_route(helix):
    async def async_hook(request) -> bool:
        return request.headers.get("x-key") == "secret"

    def broken_hook(request) -> bool:
        raise RuntimeError("boom")

    for hook in (async_hook, broken_hook):
        app = create_app(helix, authenticate=hook)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            for method, path in [
                ("GET", "/status?session_id=x"),
                ("GET", "/inbox"),
                ("POST", "/start"),
            ]:
                denied = await c.request(method, path, json={})
                assert denied.status_code == 401 and denied.json() == {
                    "detail": "Not authenticated"
                }
            allowed = await c.get("/status?session_id=ses_unknown", headers={"x-key": "secret"})
            assert allowed.status_code == (404 if hook is async_hook else 401)

    app = create_app(helix, authenticate=bearer_token("tok"))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
    ) as c:
        assert (await c.get("/runs")).status_code == 401
        assert (await c.get("/runs", headers={"Authorization": "Bearer wrong"})).status_code == 401
        assert (await c.get("/runs", headers={"Authorization": "Bearer tok"})).status_code == 200
        assert (await c.get("/runs?token=tok")).status_code == 200
        c.cookies.set("helix_token", "tok")
        assert (await c.get("/runs")).status_code == 200


async def test_a_prefix_or_an_extension_of_the_token_is_refused_in_every_carrier(helix):
    """Issue 37.4: the comparison is of the whole token (hmac.compare_digest), so neither
    a prefix nor a longer string that starts with it gets in, wherever it is sent."""
    app = create_app(helix, authenticate=bearer_token("s3cret-token"))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
    ) as c:
        for wrong in ("s", "s3cret", "s3cret-toke", "s3cret-tokenX", "s3cret-token-token"):
            bearer = {"Authorization": f"Bearer {wrong}"}
            assert (await c.get("/runs", headers=bearer)).status_code == 401
            assert (await c.get("/runs", params={"token": wrong})).status_code == 401
            c.cookies.set("helix_token", wrong)
            assert (await c.get("/runs")).status_code == 401
            c.cookies.clear()
        right = {"Authorization": "Bearer s3cret-token"}
        assert (await c.get("/runs", headers=right)).status_code == 200


# --- runs, status and the stream -----------------------------------------------------


async def test_start_status_and_sse_stream_a_whole_run_then_resume_from_last_event_id(
    client, make_agent, mock_llm
):
    @tool
    def lookup(city: str) -> str:
        """Weather for a city."""
        return f"sunny in {city}"

    agent = make_agent(tools=[lookup])
    mock_llm.add_responses(
        calls(("w1", "lookup", {"city": "Oslo"})), text("It is sunny in Oslo."), agent=agent.name
    )
    started = await client.post("/start", json={"agent": agent.name, "input": "weather?"})
    assert started.status_code == 200, started.text
    run = started.json()
    assert run["workflow_id"] == f"helix-{run['run_id']}" and run["session_id"].startswith("ses_")

    events, _ = await read_sse(client, {"session_id": run["session_id"], "run_id": run["run_id"]})
    types = [e["event"] for e in events]
    assert types[0] == "run_started" and types[-2:] == ["run_completed", "end"], types
    assert {"tool_start", "tool_end"} <= set(types)
    chunks = events[:-1]
    seqs = [int(e["id"]) for e in chunks]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert all(e["data"]["seq"] == int(e["id"]) and e["data"]["type"] == e["event"] for e in chunks)
    tool_end = next(e for e in chunks if e["event"] == "tool_end")
    assert tool_end["data"]["payload"]["tool_name"] == "lookup"

    # A reconnecting EventSource sends Last-Event-ID: only later chunks come back.
    resumed, _ = await read_sse(
        client,
        {"session_id": run["session_id"], "run_id": run["run_id"]},
        headers={"Last-Event-ID": chunks[1]["id"]},
    )
    assert [e["id"] for e in resumed[:-1]] == [e["id"] for e in chunks[2:]]
    after, _ = await read_sse(
        client, {"session_id": run["session_id"], "after_seq": chunks[-2]["id"]}
    )
    assert [e["event"] for e in after] == ["run_completed", "end"]

    status = (await client.get("/status", params={"session_id": run["session_id"]})).json()
    assert status["session"]["status"] == "completed"
    assert status["current_run"] is None and status["pending_tool_calls"] == []
    assert status["last_run"]["run_id"] == run["run_id"]
    assert status["last_run"]["output"] == "It is sunny in Oslo."

    mock_llm.add_response(text("Still sunny."), agent=agent.name)
    again = await client.post(
        "/resume", json={"session_id": run["session_id"], "message": "and now?"}
    )
    assert again.status_code == 200 and again.json()["run_id"] != run["run_id"]
    events, _ = await read_sse(
        client, {"session_id": run["session_id"], "run_id": again.json()["run_id"]}
    )
    assert events[-2]["data"]["payload"]["output"] == "Still sunny."


async def test_approval_round_trip_through_submit_tool_result(client, make_agent, mock_llm):
    ran: list[str] = []
    agent = make_agent(tools=[make_deleter(ran)])
    mock_llm.add_responses(
        calls(("d1", "delete_file", {"path": "/tmp/a"})), text("deleted it"), agent=agent.name
    )
    run = (await client.post("/start", json={"agent": agent.name, "input": "rm /tmp/a"})).json()
    status = await wait_for_pending(client, run["session_id"])
    call = status["pending_tool_calls"][0]
    assert call["tool_call_id"] == "d1" and call["kind"] == "approval"
    assert call["input"] == {"path": "/tmp/a"} and ran == []

    waiting = (await client.get("/runs", params={"status": "waiting"})).json()
    mine = next(r for r in waiting if r["run_id"] == run["run_id"])
    assert mine["waiting_for"] == "approval" and mine["tool_calls"][0]["tool_name"] == "delete_file"

    wrong_kind = await client.post(
        "/submit-tool-result",
        json={
            "session_id": run["session_id"],
            "tool_call_id": "d1",
            "kind": "client-tool-result",
            "result": 1,
        },
    )
    assert wrong_kind.status_code == 422 and "waits for approval" in wrong_kind.json()["detail"]
    unknown = await client.post(
        "/submit-tool-result",
        json={
            "session_id": run["session_id"],
            "tool_call_id": "nope",
            "kind": "approval-response",
            "approved": True,
        },
    )
    assert unknown.status_code == 404 and "nope" in unknown.json()["detail"]

    # The stream of a waiting run stays open with keep-alive comments, then carries the outcome.
    async def approve_soon() -> httpx.Response:
        await asyncio.sleep(0.8)
        return await client.post(
            "/submit-tool-result",
            json={
                "session_id": run["session_id"],
                "tool_call_id": "d1",
                "kind": "approval-response",
                "approved": True,
            },
        )

    approval = asyncio.ensure_future(approve_soon())
    events, comments = await read_sse(
        client, {"session_id": run["session_id"], "run_id": run["run_id"]}
    )
    answered = await approval
    assert answered.status_code == 200 and answered.json()["accepted"] is True
    assert ": keep-alive" in comments
    assert [e["event"] for e in events][-2:] == ["run_completed", "end"]
    assert "tool_approval_request" in [e["event"] for e in events]
    assert ran == ["/tmp/a"]

    again = await client.post(
        "/submit-tool-result",
        json={
            "session_id": run["session_id"],
            "tool_call_id": "d1",
            "kind": "approval-response",
            "approved": True,
        },
    )
    assert again.status_code == 409 and "already answered" in again.json()["detail"]

    transcript = (await client.get(f"/sessions/{run['session_id']}/messages")).json()
    assert [m["role"] for m in transcript] == ["user", "assistant", "tool", "assistant"]
    assert (
        transcript[2]["content"] == "deleted /tmp/a" and transcript[0]["seq"] < transcript[1]["seq"]
    )
    usage = (await client.get(f"/sessions/{run['session_id']}/usage")).json()
    assert usage["totals"]["llm_calls"] == 2 and usage["by_model"][0]["llm_calls"] == 2


async def test_client_tool_result_with_size_limit(
    helix, client, make_agent, mock_llm, database_url
):
    @tool(execute="client")
    def get_location() -> dict:
        """Where the user is."""

    agent = make_agent(tools=[get_location])
    mock_llm.add_responses(calls(("c1", "get_location", {})), text("found you"), agent=agent.name)
    run = (await client.post("/start", json={"agent": agent.name, "input": "where?"})).json()
    await wait_for_pending(client, run["session_id"])
    body = {"session_id": run["session_id"], "tool_call_id": "c1", "kind": "client-tool-result"}

    small_app = create_app(helix, allow_unauthenticated=True, max_result_bytes=100)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=small_app), base_url="http://127.0.0.1"
    ) as c:
        too_big = await c.post("/submit-tool-result", json={**body, "result": {"blob": "x" * 500}})
        assert too_big.status_code == 413 and "the limit is 100 bytes" in too_big.json()["detail"]
        huge_body = await c.post("/submit-tool-result", json={**body, "result": "y" * 200_000})
        assert huge_body.status_code == 413 and "Request body" in huge_body.json()["detail"]
    both = await client.post("/submit-tool-result", json={**body, "result": 1, "error": "x"})
    assert both.status_code == 422 and "exactly one of result or error" in both.json()["detail"]
    assert sql(
        database_url, "SELECT status FROM helix.tool_calls WHERE run_id = %s", run["run_id"]
    ) == [("pending",)], "rejected answers change nothing"

    ok = await client.post("/submit-tool-result", json={**body, "result": {"lat": 52.5}})
    assert ok.status_code == 200
    result = await (await helix.get_handle(run["run_id"])).result()
    assert result.status == "completed" and result.output == "found you"


async def test_interrupt_and_abort(helix, client, make_agent, mock_llm, database_url):
    release = threading.Event()

    @tool
    def long_task() -> str:
        """Takes a while."""
        release.wait(30)
        return "finished"

    agent = make_agent(tools=[long_task])
    mock_llm.add_responses(calls(("l", "long_task", {})), agent=agent.name)
    run = (await client.post("/start", json={"agent": agent.name, "input": "work"})).json()
    for _ in range(200):  # the LLM step is checkpointed: the tool is running
        done = sql(
            database_url,
            "SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = %s",
            run["workflow_id"],
        )[0][0]
        if done >= 1:
            break
        await asyncio.sleep(0.05)
    stop = await client.post(
        "/interrupt", json={"session_id": run["session_id"], "reason": "stop please"}
    )
    assert stop.status_code == 200 and stop.json() == {
        "session_id": run["session_id"],
        "run_id": run["run_id"],
        "run_ids": [run["run_id"]],
        "action": "interrupt_requested",
    }
    release.set()
    result = await (await helix.get_handle(run["run_id"])).result()
    assert result.status == "interrupted" and "stop please" in result.error
    again = await client.post("/interrupt", json={"session_id": run["session_id"]})
    assert again.status_code == 409 and "no run in progress" in again.json()["detail"]

    ran: list[str] = []
    gated = make_agent(tools=[make_deleter(ran)])
    mock_llm.add_responses(calls(("d", "delete_file", {"path": "q"})), agent=gated.name)
    waiting = (await client.post("/start", json={"agent": gated.name, "input": "rm q"})).json()
    await wait_for_pending(client, waiting["session_id"])
    aborted = await client.post(
        "/abort", json={"session_id": waiting["session_id"], "reason": "no"}
    )
    assert aborted.status_code == 200 and aborted.json()["action"] == "aborted"
    status = (await client.get("/status", params={"session_id": waiting["session_id"]})).json()
    assert status["session"]["status"] == "aborted" and status["current_run"] is None
    assert status["last_run"]["status"] == "aborted" and "no" in status["last_run"]["error"]
    assert (
        await client.post("/abort", json={"session_id": waiting["session_id"]})
    ).status_code == 409
    assert ran == []


# --- errors -------------------------------------------------------------------------


async def test_errors_are_4xx_with_messages(client, make_agent, mock_llm):
    unknown = await client.get("/status", params={"session_id": "ses_missing"})
    assert (
        unknown.status_code == 404
        and unknown.json()["detail"] == "Session 'ses_missing' does not exist"
    )
    for path in ("/sessions/ses_missing/messages", "/sessions/ses_missing/usage"):
        assert (await client.get(path)).status_code == 404
    sse = await client.get("/sse", params={"session_id": "ses_missing"})
    assert sse.status_code == 404 and "ses_missing" in sse.json()["detail"]

    no_agent = await client.post("/start", json={"agent": "no_such_agent"})
    assert no_agent.status_code == 404 and "no_such_agent" in no_agent.json()["detail"]

    long_id = await client.post("/start", json={"agent": "a", "session_id": "s" * 201})
    assert long_id.status_code == 422
    assert long_id.json()["detail"] == "session_id is 201 characters long; the limit is 200"
    long_query = await client.get("/status", params={"session_id": "s" * 500})
    assert long_query.status_code == 422 and "limit is 200" in long_query.json()["detail"]

    missing = await client.post("/start", json={"input": "hi"})
    assert missing.status_code == 422 and missing.json()["detail"] == "agent: Field required"
    wrong_type = await client.post("/resume", json={"session_id": 5})
    assert wrong_type.status_code == 422 and "session_id" in wrong_type.json()["detail"]
    extra = await client.post("/interrupt", json={"session_id": "x", "force": True})
    assert (
        extra.status_code == 422
        and "force: Extra inputs are not permitted" in extra.json()["detail"]
    )
    not_json = await client.post(
        "/start", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert not_json.status_code == 422 and "JSON" in not_json.json()["detail"]
    no_approved = await client.post(
        "/submit-tool-result",
        json={"session_id": "s", "tool_call_id": "t", "kind": "approval-response"},
    )
    assert no_approved.status_code == 422 and "approved" in no_approved.json()["detail"]
    stray = await client.post(
        "/submit-tool-result",
        json={
            "session_id": "s",
            "tool_call_id": "t",
            "kind": "approval-response",
            "approved": True,
            "result": 1,
        },
    )
    assert stray.status_code == 422 and "result does not apply" in stray.json()["detail"]

    @tool(require_approval=True)
    def gate() -> str:
        """Gated."""
        return "ok"

    agent = make_agent(tools=[gate])
    mock_llm.add_responses(calls(("g", "gate", {})), agent=agent.name)
    run = (await client.post("/start", json={"agent": agent.name, "input": "go"})).json()
    await wait_for_pending(client, run["session_id"])
    busy = await client.post("/start", json={"agent": agent.name, "session_id": run["session_id"]})
    assert busy.status_code == 409 and "already has a run in progress" in busy.json()["detail"]
    other = make_agent()
    mismatch = await client.post(
        "/start", json={"agent": other.name, "session_id": run["session_id"]}
    )
    assert mismatch.status_code == 409 and "belongs to agent" in mismatch.json()["detail"]
    bad_resume = await client.get(
        "/sse", params={"session_id": run["session_id"]}, headers={"Last-Event-ID": "abc"}
    )
    assert bad_resume.status_code == 422 and "Last-Event-ID" in bad_resume.json()["detail"]
    assert (await client.post("/abort", json={"session_id": run["session_id"]})).status_code == 200


# --- OpenAPI --------------------------------------------------------------------------


async def test_openapi_documents_every_endpoint_with_its_schemas(client):
    doc = (await client.get("/openapi.json")).json()
    posts = {
        "/start": "StartRequest",
        "/resume": "ResumeRequest",
        "/interrupt": "ControlRequest",
        "/abort": "ControlRequest",
        "/submit-tool-result": "SubmitToolResultRequest",
        "/chat": "ChatRequest",
        "/chat/invoke": "ChatInvokeRequest",
        "/chat/add-ai-message": "AddAIMessageRequest",
    }
    for path, request_model in posts.items():
        operation = doc["paths"][path]["post"]
        ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        assert ref.endswith("/" + request_model), (path, ref)
        assert "$ref" in operation["responses"]["200"]["content"]["application/json"]["schema"], (
            path
        )
        for code in ("404", "409", "422"):
            assert code in operation["responses"], (path, code)
    gets = ["/status", "/runs", "/sessions/{session_id}/messages", "/sessions/{session_id}/usage"]
    for path in gets:
        schema = doc["paths"][path]["get"]["responses"]["200"]["content"]["application/json"][
            "schema"
        ]
        assert schema.get("$ref") or schema.get("items", {}).get("$ref"), path
    assert "text/event-stream" in doc["paths"]["/sse"]["get"]["responses"]["200"]["content"]
    assert "text/html" in doc["paths"]["/inbox"]["get"]["responses"]["200"]["content"]
    assert doc["paths"]["/chat"]["post"]["responses"]["202"]
    schemas = doc["components"]["schemas"]
    assert set(schemas["ChatResponse"]["required"]) >= {"response", "generated_messages"}
    assert schemas["ErrorResponse"]["required"] == ["detail"]
    # Every reference resolves inside the document (a protocol route's hand-written body
    # schema once carried pydantic's `#/$defs/...`, which ReDoc cannot render).
    refs = re.findall(r'"\$ref": ?"([^"]+)"', json.dumps(doc))
    assert refs and all(ref.startswith("#/components/schemas/") for ref in refs), {
        ref for ref in refs if not ref.startswith("#/components/schemas/")
    }
    assert all(ref.rsplit("/", 1)[-1] in schemas for ref in refs)


# --- chat (seed 004) ----------------------------------------------------------------------


def task_tools(log: list[str]):
    @tool
    def search(query: str) -> str:
        """Search the web."""
        log.append(query)
        return f"results for {query}"

    @tool
    def complete_task(result: str) -> str:
        """Return the final result."""
        return f"Task completed: {result}"

    return [search, complete_task]


async def test_chat_with_terminating_config_returns_response_and_generated_messages(
    client, make_agent, mock_llm, database_url
):
    searched: list[str] = []
    agent = make_agent(tools=task_tools(searched))
    mock_llm.add_responses(
        calls(("s1", "search", {"query": "pricing"})),
        calls(("t1", "complete_task", {"result": "cheap"}), ("s2", "search", {"query": "never"})),
        agent=agent.name,
    )
    reply = await client.post(
        "/chat",
        json={
            "context_id": "ctx-terminating-1",
            "agent": agent.name,
            "message": "Research pricing",
            "terminating_config": {"tool_ids": ["complete_task"]},
        },
    )
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["response"] == "Task completed: cheap"
    assert body["saved_ai_messages"] is True and body["status"] == "completed"
    assert body["generated_messages"] == [
        {"sender": "human", "message": "Research pricing"},
        {
            "type": "tool_call",
            "tool_call_id": "s1",
            "tool_name": "search",
            "tool_input": {"query": "pricing"},
        },
        {"type": "tool_response", "tool_call_id": "s1", "tool_output": "results for pricing"},
        {
            "type": "tool_call",
            "tool_call_id": "t1",
            "tool_name": "complete_task",
            "tool_input": {"result": "cheap"},
        },
        {"type": "tool_response", "tool_call_id": "t1", "tool_output": "Task completed: cheap"},
    ]
    assert searched == ["pricing"], "the call after the terminating tool never ran"
    assert (
        sql(
            database_url,
            "SELECT count(*) FROM helix.messages WHERE session_id = 'ctx-terminating-1'",
        )[0][0]
        == 5
    )

    # invoke: no new human message, same context (session); nudges then the terminating tool
    mock_llm.add_responses(
        text("I think I'm done"),
        calls(("t2", "complete_task", {"result": "again"})),
        agent=agent.name,
    )
    invoked = await client.post(
        "/chat/invoke",
        json={
            "context_id": "ctx-terminating-1",
            "terminating_config": {"tool_ids": ["complete_task"], "consecutive_nudges": 1},
        },
    )
    assert invoked.status_code == 200, invoked.text
    assert invoked.json()["response"] == "Task completed: again"
    generated = invoked.json()["generated_messages"]
    assert generated[0] == {"sender": "ai", "message": "I think I'm done"}, "no new human message"
    assert generated[-1]["tool_output"] == "Task completed: again"

    mock_llm.add_responses(text("chatting"), text("still chatting"), agent=agent.name)
    failed = await client.post(
        "/chat/add-ai-message",
        json={
            "context_id": "ctx-terminating-1",
            "prompt": "Summarise via complete_task",
            "terminating_config": {
                "tool_ids": ["complete_task"],
                "consecutive_nudges": 1,
                "nudge_message": "Call complete_task!",
            },
        },
    )
    assert failed.status_code == 422
    assert failed.json()["detail"] == "Max consecutive nudges exceeded"
    assert (
        failed.json()["status"] == "failed" and failed.json()["session_id"] == "ctx-terminating-1"
    )
    assert "Call complete_task!" in json.dumps(
        [m.model_dump() for m in mock_llm.get_last_input().messages]
    )

    unknown_tool = await client.post(
        "/chat",
        json={
            "context_id": "ctx-x",
            "agent": agent.name,
            "message": "hi",
            "terminating_config": {"tool_ids": ["nope"]},
        },
    )
    assert unknown_tool.status_code == 422 and "has no tool 'nope'" in unknown_tool.json()["detail"]
    empty = await client.post(
        "/chat",
        json={
            "context_id": "ctx-x",
            "agent": agent.name,
            "message": "hi",
            "terminating_config": {"tool_ids": []},
        },
    )
    assert empty.status_code == 422 and "tool_ids" in empty.json()["detail"]


async def test_chat_uses_the_default_agent_and_answers_202_when_a_human_must_act(
    helix, make_agent, mock_llm
):
    ran: list[str] = []
    agent = make_agent(tools=[make_deleter(ran)])
    app = create_app(helix, allow_unauthenticated=True, default_agent=agent.name)
    with serve(app) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as c:
            mock_llm.add_responses(text("hello there"), agent=agent.name)
            plain = await c.post("/chat", json={"context_id": "ctx-default-1", "message": "hi"})
            assert plain.status_code == 200 and plain.json()["response"] == "hello there"
            assert plain.json()["generated_messages"] == [
                {"sender": "human", "message": "hi"},
                {"sender": "ai", "message": "hello there"},
            ]

            mock_llm.add_responses(
                calls(("d9", "delete_file", {"path": "/x"})), text("gone"), agent=agent.name
            )
            waiting = await c.post(
                "/chat", json={"context_id": "ctx-default-1", "message": "rm /x"}
            )
            assert waiting.status_code == 202, waiting.text
            body = waiting.json()
            assert body["status"] == "waiting" and body["response"] is None
            assert body["pending_tool_calls"][0]["tool_call_id"] == "d9"
            await c.post(
                "/submit-tool-result",
                json={
                    "session_id": "ctx-default-1",
                    "tool_call_id": "d9",
                    "kind": "approval-response",
                    "approved": True,
                },
            )
            result = await (await helix.get_handle(body["run_id"])).result()
            assert result.status == "completed" and ran == ["/x"]

    no_default = create_app(helix, allow_unauthenticated=True)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=no_default), base_url="http://127.0.0.1"
    ) as c:
        missing = await c.post("/chat", json={"context_id": "ctx-new-no-agent", "message": "hi"})
        assert missing.status_code == 422 and "agent is required" in missing.json()["detail"]
