"""Double texting over HTTP (issue 31): `multitask_strategy` on /start and the chat
routes, /queue and /queue/cancel, and bad input as 422s, on a real uvicorn."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from helpers import sql
from live_server import serve

from helix_dbos.server import create_app

pytest_plugins = ["double_texting_support"]  # the gate and the scripted model


@pytest.fixture(scope="module")
def base_url(helix):
    with serve(create_app(helix, allow_unauthenticated=True, keepalive_seconds=0.3)) as url:
        yield url


@pytest.fixture
async def client(base_url) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as c:
        yield c


async def start_held(client: httpx.AsyncClient, agent: str, gate: Any) -> dict:
    started = await client.post("/start", json={"agent": agent, "input": "hold"})
    assert started.status_code == 200, started.text
    await gate.wait_entered()
    return started.json()


async def wait_run_end(helix, run_id: str) -> str:
    return (await helix.wait_for_run_end((await helix.get_run(run_id)).session_id, run_id)).status


async def test_start_rejects_by_default_and_enqueues_when_asked(
    helix, make_agent, scripted, gate, client, database_url
):
    agent = make_agent(tools=[gate.tool])
    first = await start_held(client, agent.name, gate)
    sid = first["session_id"]
    again = await client.post("/start", json={"agent": agent.name, "input": "x", "session_id": sid})
    assert again.status_code == 409 and "already has a run" in again.json()["detail"]
    body = {"agent": agent.name, "input": "two", "session_id": sid, "multitask_strategy": "enqueue"}
    queued = await client.post("/start", json=body)
    assert queued.status_code == 200, queued.text
    message_id = queued.json()["message_id"]
    assert message_id and queued.json()["run_id"] != first["run_id"]
    listed = (await client.get("/queue", params={"session_id": sid})).json()
    assert [(m["message_id"], m["status"], m["position"]) for m in listed] == [
        (message_id, "queued", 1)
    ]
    gate.release.set()
    assert await wait_run_end(helix, first["run_id"]) == "completed"
    for _ in range(200):
        listed = (await client.get("/queue", params={"session_id": sid})).json()
        if listed[0]["status"] != "queued":
            break
        await asyncio.sleep(0.05)
    assert listed[0]["status"] == "started" and listed[0]["run_id"] == queued.json()["run_id"]
    assert await wait_run_end(helix, queued.json()["run_id"]) == "completed"


async def test_cancel_over_http(helix, make_agent, scripted, gate, client, database_url):
    agent = make_agent(tools=[gate.tool])
    first = await start_held(client, agent.name, gate)
    sid = first["session_id"]
    body = {"agent": agent.name, "input": "no", "session_id": sid, "multitask_strategy": "enqueue"}
    message_id = (await client.post("/start", json=body)).json()["message_id"]
    cancelled = await client.post(
        "/queue/cancel", json={"session_id": sid, "message_id": message_id}
    )
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    again = await client.post("/queue/cancel", json={"session_id": sid, "message_id": message_id})
    assert again.status_code == 200 and again.json()["status"] == "cancelled"  # idempotent
    missing = await client.post("/queue/cancel", json={"session_id": sid, "message_id": "msg_nope"})
    assert missing.status_code == 404
    gate.release.set()
    assert await wait_run_end(helix, first["run_id"]) == "completed"
    runs = sql(database_url, "SELECT count(*) FROM helix.runs WHERE session_id = %s", sid)
    assert runs == [(1,)]


@pytest.mark.parametrize("strategy", ["enqueue", "interrupt", "rollback", "steer"])
async def test_chat_with_each_strategy_answers_with_the_turn_it_joined(
    helix, make_agent, scripted, gate, client, strategy
):
    agent = make_agent(tools=[gate.tool])
    first = await start_held(client, agent.name, gate)
    sid = first["session_id"]
    body = {"context_id": sid, "message": "second", "multitask_strategy": strategy}
    chat = asyncio.ensure_future(client.post("/chat", json=body))
    await asyncio.sleep(0.3)  # the message is stored before the gate opens
    gate.release.set()
    reply = await chat
    assert reply.status_code == 200, reply.text
    data = reply.json()
    assert data["response"] == "re: second"
    ended = await wait_run_end(helix, first["run_id"])
    expected = {
        "enqueue": "completed",
        "interrupt": "interrupted",
        "rollback": "aborted",
        "steer": "completed",
    }[strategy]
    assert ended == expected
    assert (data["run_id"] == first["run_id"]) == (strategy == "steer")


async def test_chat_invoke_and_add_ai_message_take_the_field(
    helix, make_agent, scripted, gate, client
):
    agent = make_agent(tools=[gate.tool])
    first = await start_held(client, agent.name, gate)
    sid = first["session_id"]
    invoke = asyncio.ensure_future(
        client.post("/chat/invoke", json={"context_id": sid, "multitask_strategy": "enqueue"})
    )
    add = asyncio.ensure_future(
        client.post(
            "/chat/add-ai-message",
            json={"context_id": sid, "prompt": "say hi", "multitask_strategy": "enqueue"},
        )
    )
    await asyncio.sleep(0.3)
    gate.release.set()
    replies = [await invoke, await add]
    assert [r.status_code for r in replies] == [200, 200], [r.text for r in replies]
    assert replies[1].json()["response"] == "re: say hi"
    assert len(await helix.list_runs(sid)) == 3


async def test_bad_strategy_and_nul_bytes_are_422(
    helix, make_agent, scripted, gate, client, database_url
):
    agent = make_agent(tools=[gate.tool])
    first = await start_held(client, agent.name, gate)
    sid = first["session_id"]
    bad = [
        (
            "/start",
            {"agent": agent.name, "input": "x", "session_id": sid, "multitask_strategy": "later"},
        ),
        ("/chat", {"context_id": sid, "message": "x", "multitask_strategy": "later"}),
        ("/chat/invoke", {"context_id": sid, "multitask_strategy": 3}),
        (
            "/start",
            {
                "agent": agent.name,
                "input": "a\x00b",
                "session_id": sid,
                "multitask_strategy": "enqueue",
            },
        ),
        ("/chat", {"context_id": sid, "message": "a\x00b", "multitask_strategy": "steer"}),
        ("/queue/cancel", {"session_id": sid, "message_id": "m\x00"}),
    ]
    for path, body in bad:
        response = await client.post(path, json=body)
        assert response.status_code == 422, (path, response.status_code, response.text)
        assert response.json()["detail"]
    assert (await client.get("/queue", params={"session_id": "s\x00"})).status_code == 422
    gate.release.set()
    assert await wait_run_end(helix, first["run_id"]) == "completed"
    assert sql(
        database_url, "SELECT count(*) FROM helix.queued_messages WHERE session_id = %s", sid
    ) == [(0,)]


async def test_the_python_client_sends_and_cancels_stored_messages(
    helix, make_agent, scripted, gate, base_url
):
    from helix_dbos.client import AsyncHelixClient  # noqa: PLC0415

    agent = make_agent(tools=[gate.tool])
    async with AsyncHelixClient(base_url) as client:
        first = await client.start(agent.name, "hold")
        await gate.wait_entered()
        sid = first.session_id
        kept = await client.start(agent.name, "kept", session_id=sid, multitask_strategy="enqueue")
        dropped = await client.start(
            agent.name, "dropped", session_id=sid, multitask_strategy="enqueue"
        )
        assert kept.message_id and dropped.message_id
        listed = await client.queued_messages(sid)
        assert [(m.content, m.position) for m in listed] == [("kept", 1), ("dropped", 2)]
        cancelled = await client.cancel_queued(sid, dropped.message_id)
        assert cancelled.status == "cancelled"
        gate.release.set()
        chat = await client.chat(sid, "and this", multitask_strategy="enqueue")
        assert chat.response == "re: and this"
        statuses = [(m.content, m.status) for m in await client.queued_messages(sid)]
    assert ("kept", "started") in statuses and ("dropped", "cancelled") in statuses
    assert len(await helix.list_runs(sid)) == 3  # "and this" got its own run, stored or not
