"""Time travel over HTTP (issue 30), on a real uvicorn: checkpoints, a checkpoint's
transcript, forks, and bad ids as 4xx (never 5xx)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from helpers import calls
from live_server import serve
from test_time_travel import no_slow_tool_heads  # noqa: F401 - autouse: these tests count checkpoints

from helix_dbos import tool
from helix_dbos.server import bearer_token, create_app


@tool
def look(what: str) -> str:
    """Look at something."""
    return f"saw {what}"


@pytest.fixture(scope="module")
def base_url(helix):
    with serve(create_app(helix, allow_unauthenticated=True)) as url:
        yield url


@pytest.fixture
async def client(base_url) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as c:
        yield c


async def finished_session(helix, make_agent, mock_llm):
    agent = make_agent(tools=[look])
    mock_llm.add_responses(
        calls(("l1", "look", {"what": "sea"})),
        {"type": "text", "content": "done"},
        agent=agent.name,
    )
    return agent, await (await helix.execute(agent, "look")).result()


async def test_checkpoints_a_checkpoint_and_a_fork(helix, client, make_agent, mock_llm):
    agent, result = await finished_session(helix, make_agent, mock_llm)
    listed = await client.get(f"/sessions/{result.session_id}/checkpoints")
    assert listed.status_code == 200
    body = listed.json()
    assert [c["step"] for c in body] == [1, 2] and body[0]["run_id"] == result.run_id
    assert set(body[0]) >= {
        "checkpoint_id",
        "run_id",
        "step",
        "message_seq",
        "state",
        "usage",
        "created_at",
    }

    first = body[0]["checkpoint_id"]
    one = await client.get(f"/sessions/{result.session_id}/checkpoints/{first}")
    assert one.status_code == 200
    assert [m["role"] for m in one.json()["messages"]] == ["user", "assistant", "tool"]

    forked = await client.post(f"/sessions/{result.session_id}/fork", json={"at": first})
    assert forked.status_code == 200, forked.text
    new = forked.json()
    assert new["forked_from_checkpoint_id"] == first
    mock_llm.add_responses({"type": "text", "content": "from the fork"}, agent=agent.name)
    resumed = await client.post("/resume", json={"session_id": new["session_id"]})
    assert resumed.status_code == 200
    outcome = await (await helix.get_handle(resumed.json()["run_id"])).result()
    assert outcome.output == "from the fork"

    named = await client.post(
        f"/sessions/{result.session_id}/fork", json={"at": first, "new_session_id": "my-fork-1"}
    )
    assert named.json()["session_id"] == "my-fork-1"
    again = await client.post(
        f"/sessions/{result.session_id}/fork", json={"at": first, "new_session_id": "my-fork-1"}
    )
    assert again.status_code == 422 and "exists" in again.json()["detail"]


async def test_bad_ids_are_4xx_never_5xx(helix, client, make_agent, mock_llm):
    _, result = await finished_session(helix, make_agent, mock_llm)
    sid = result.session_id
    cases = [
        ("GET", f"/sessions/{sid}/checkpoints/nope", None, 404),
        ("GET", "/sessions/ses_missing/checkpoints", None, 404),
        ("GET", f"/sessions/{sid}/checkpoints/bad%00id", None, 422),
        ("GET", "/sessions/bad%00sid/checkpoints", None, 422),
        ("POST", f"/sessions/{sid}/fork", {"at": "nope"}, 404),
        ("POST", f"/sessions/{sid}/fork", {"at": "bad\u0000id"}, 422),
        ("POST", f"/sessions/{sid}/fork", {"at": "x", "extra": 1}, 422),
        ("POST", f"/sessions/{sid}/fork", {}, 422),
        ("POST", "/sessions/ses_missing/fork", {"at": "x"}, 404),
        ("GET", f"/sessions/{sid}/checkpoints/{'x' * 500}", None, 422),
    ]
    for method, path, body, status in cases:
        response = await client.request(method, path, json=body)
        assert response.status_code == status, (path, body, response.text)
        assert response.json()["detail"]
    unknown = await client.get(f"/sessions/{sid}/checkpoints/run_x:1")
    assert "does not exist" in unknown.json()["detail"]


async def test_checkpoint_routes_are_guarded(helix, make_agent, mock_llm):
    _, result = await finished_session(helix, make_agent, mock_llm)
    with serve(create_app(helix, authenticate=bearer_token("tok"))) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as c:
            path = f"/sessions/{result.session_id}/checkpoints"
            assert (await c.get(path)).status_code == 401
            ok = await c.get(path, headers={"Authorization": "Bearer tok"})
            assert ok.status_code == 200 and len(ok.json()) == 2


async def test_openapi_documents_the_time_travel_routes(client):
    doc = (await client.get("/openapi.json")).json()
    fork = doc["paths"]["/sessions/{session_id}/fork"]["post"]
    ref = fork["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert ref.endswith("/ForkRequest")
    assert {"404", "409", "422"} <= set(fork["responses"])
    for path in (
        "/sessions/{session_id}/checkpoints",
        "/sessions/{session_id}/checkpoints/{checkpoint_id}",
    ):
        schema = doc["paths"][path]["get"]["responses"]["200"]["content"]["application/json"][
            "schema"
        ]
        assert schema.get("$ref") or schema.get("items", {}).get("$ref"), path
    assert {"Checkpoint", "CheckpointView", "Forked"} <= set(doc["components"]["schemas"])
