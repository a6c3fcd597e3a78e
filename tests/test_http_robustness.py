"""Nothing a client sends gets a 5xx: arbitrary Unicode (NUL, lone surrogates, huge and
deeply nested JSON) in every field, id and query string of the HTTP API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pytest
from helpers import sql
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from live_server import serve

from helix_dbos.server import create_app

TEXT = st.text(max_size=30) | st.sampled_from(["\x00", "a\ud800b", "\udfff", "x" * 100_000])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=10,
)


@pytest.fixture(scope="module")
def base_url(helix) -> Iterator[str]:
    with serve(create_app(helix, allow_unauthenticated=True, keepalive_seconds=0.3)) as url:
        yield url


@pytest.fixture(scope="module")
def client(base_url: str) -> Iterator[httpx.Client]:
    """One client for the module: a client each example built a TLS context (about 40 ms
    of CPU) for plain HTTP. A connection a request (no keep-alive), so that no request
    meets a connection the server closed after its 0.3 s keep-alive."""
    limits = httpx.Limits(max_keepalive_connections=0)
    with httpx.Client(base_url=base_url, timeout=30, limits=limits) as shared:
        yield shared


def post(client: httpx.Client, path: str, body: object) -> httpx.Response:
    # json.dumps escapes NUL and lone surrogates as \u0000 / \ud800, as a client would.
    return client.post(path, content=json.dumps(body), headers={"content-type": "application/json"})


def raw(text: str) -> str:
    """`text` percent-encoded as raw bytes (invalid UTF-8 included), at most 2 kB: a URL
    holds what a client can send."""
    return quote(text.encode("utf-8", "surrogatepass")[:2000], safe="")


def get(client: httpx.Client, path: str, params: dict[str, str]) -> httpx.Response:
    query = "&".join(f"{k}={raw(v)}" for k, v in params.items())
    return client.get(f"{path}?{query}")


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=TEXT, value=JSON, make_agent_name=st.booleans())
def test_no_request_gets_a_server_error(client, make_agent, text, value, make_agent_name):
    agent = make_agent().name if make_agent_name else text
    responses = [
        post(client, "/start", {"agent": agent, "input": text, "state": {"k": value}}),
        post(client, "/start", {"agent": agent, "session_id": text}),
        post(client, "/resume", {"session_id": text, "message": text}),
        post(client, "/interrupt", {"session_id": text, "reason": text}),
        post(client, "/abort", {"session_id": text, "reason": text}),
        post(
            client,
            "/submit-tool-result",
            {"session_id": text, "tool_call_id": text, "kind": "client", "result": value},
        ),
        post(client, "/chat", {"context_id": text, "agent": agent, "message": text}),
        get(client, "/status", {"session_id": text}),
        get(client, "/runs", {"session_id": text}),
        get(client, "/sse", {"session_id": text, "run_id": text}),
        # Raw bytes in the path, invalid UTF-8 included (a lone surrogate's bytes).
        client.get(f"/sessions/{raw(text)}/messages"),
    ]
    assert [r.status_code for r in responses if r.status_code >= 500] == [], [
        (r.request.url.path, r.status_code, r.text[:200]) for r in responses if r.status_code >= 500
    ]


def test_a_chunked_body_over_the_limit_is_refused_and_stores_nothing(base_url, make_agent, helix):
    agent = make_agent()
    prefix = json.dumps({"agent": agent.name, "input": ""})[:-2].encode()  # ..."input": "

    def chunks() -> Iterator[bytes]:
        yield prefix
        for _ in range(100):  # 10 MB of input, with no Content-Length
            yield b"x" * 100_000
        yield b'"}'

    with httpx.Client(base_url=base_url, timeout=60) as client:
        response = client.post(
            "/start", content=chunks(), headers={"content-type": "application/json"}
        )
    assert response.status_code == 413, response.text[:200]
    assert "limit" in response.json()["detail"]
    assert response.request.headers.get("transfer-encoding") == "chunked"
    rows = sql(
        helix.database_url, "SELECT count(*) FROM helix.sessions WHERE agent_name = %s", agent.name
    )
    assert rows == [(0,)]


def test_a_chunked_body_under_the_limit_still_works(base_url, make_agent, mock_llm):
    agent = make_agent()
    mock_llm.add_response({"type": "text", "content": "hi"}, agent=agent.name)
    body = json.dumps({"agent": agent.name, "input": "hello"}).encode()
    with httpx.Client(base_url=base_url, timeout=60) as client:
        response = client.post(
            "/start",
            content=iter([body[:10], body[10:]]),
            headers={"content-type": "application/json"},
        )
    assert response.status_code == 200, response.text
