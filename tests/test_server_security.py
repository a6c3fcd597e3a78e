"""Issue 35: the server as an attacker sees it, over a real uvicorn on 127.0.0.1.

Sign-in sets an HttpOnly cookie (no script holds the token), every response carries
the security headers, `?token=` leaves the address bar, authentication comes before the
body, bodies and headers have deadlines, SSE streams are capped, over-deep JSON is
refused at the edge, an unauthenticated server checks Host and Origin, and a principal
sees only its own sessions and is recorded as who answered.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from contextlib import closing

import httpx
import pytest
import uvicorn
from helpers import calls, sql, wait_until_waiting
from live_server import serve

from helix_dbos import tool
from helix_dbos.errors import InvalidInputError
from helix_dbos.server import Principal, bearer_token, create_app
from helix_dbos.server.http.limits import with_header_timeout
from helix_dbos.server.pages import page

HTML = {"Accept": "text/html,application/xhtml+xml"}


def nest(depth: int) -> dict:
    value: dict = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def gated_agent(make_agent, mock_llm, ran: list[str], call_id: str = "d1", n: int = 1):
    @tool(require_approval=True)
    def delete_file(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return f"deleted {path}"

    agent = make_agent(tools=[delete_file])
    # Every run asks first (the runs wait side by side), then each finishes.
    mock_llm.add_responses(
        *[calls((call_id, "delete_file", {"path": "/tmp/x"}))] * n,
        *[{"type": "text", "content": "done"}] * n,
        agent=agent.name,
    )
    return agent


def raw_request(url: str, data: bytes, *, wait: float = 20.0) -> bytes:
    """Send `data` on a fresh socket and read until the server closes (or `wait`)."""
    host, port = url.removeprefix("http://").split(":")
    with closing(socket.create_connection((host, int(port)))) as sock:
        sock.settimeout(wait)
        sock.sendall(data)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except TimeoutError:
            received += b"<still open>"
    return received


# --- 3. sign-in: an HttpOnly cookie set by the server; security headers -------------


def assert_security_headers(response: httpx.Response) -> None:
    csp = response.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp
    assert "'unsafe-inline'" not in csp.split("script-src")[1].split(";")[0]
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"


async def test_sign_in_posts_the_token_and_the_server_sets_an_httponly_cookie(helix):
    app = create_app(helix, authenticate=bearer_token("s3cret"), cookie_max_age_seconds=600)
    with serve(app) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as c:
            form = await c.get("/inbox", headers=HTML)
            assert form.status_code == 401 and 'action="sign-in"' in form.text
            assert_security_headers(form)
            for name in ("sign_in.html", "inbox.html"):  # no inline script: all are files
                assert re.findall(r"<script(?![^>]*\bsrc=)", page(name)) == [], name
                assert "style=" not in page(name) and "<style" not in page(name)
            for name in ("sign_in.js", "inbox.js"):
                script = (await c.get(f"/assets/{name}")).text
                code = "\n".join(
                    line for line in script.splitlines() if not line.strip().startswith("//")
                )
                assert "document.cookie" not in code and "token" not in code.lower(), name

            wrong = await c.post("/sign-in", data={"token": "nope", "name": "Ada"})
            assert wrong.status_code == 401 and "set-cookie" not in wrong.headers
            assert "That token was not accepted" in wrong.text
            blank = await c.post("/sign-in", data={"token": "  "})
            assert blank.status_code == 401 and "set-cookie" not in blank.headers

            signed = await c.post("/sign-in", data={"token": "s3cret", "name": "Ada"})
            assert signed.status_code == 303 and signed.headers["location"] == "inbox"
            cookie = signed.headers["set-cookie"]
            parts = [p.strip() for p in cookie.split(";")]
            assert parts[0] == "helix_token=s3cret"
            assert {"HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=600"} <= set(parts)
            assert "Secure" not in parts  # plain http: a Secure cookie would never come back
            assert_security_headers(signed)
            inbox = await c.get("/inbox", headers=HTML)  # the client keeps the cookie
            assert inbox.status_code == 200 and "<title>helix inbox</title>" in inbox.text
            assert_security_headers(inbox)
            assert_security_headers(await c.get("/runs"))

            out = await c.post("/sign-out")
            assert out.status_code == 303 and "Max-Age=0" in out.headers["set-cookie"]
            assert (await c.get("/runs")).status_code == 401

            # Another site cannot sign a browser in (or out): login CSRF.
            for path in ("/sign-in", "/sign-out"):
                forged = await c.post(
                    path, data={"token": "s3cret"}, headers={"Sec-Fetch-Site": "cross-site"}
                )
                assert forged.status_code == 403 and "set-cookie" not in forged.headers

    # Over https the cookie is Secure.
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="https://127.0.0.1") as c:
        signed = await c.post("/sign-in", data={"token": "s3cret"})
        assert signed.status_code == 303 and "; Secure" in signed.headers["set-cookie"]


# --- 4. the token out of addresses and logs -------------------------------------------


async def test_a_token_in_the_inbox_address_moves_into_the_cookie(helix):
    with serve(create_app(helix, authenticate=bearer_token("s3cret"))) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as c:
            moved = await c.get("/inbox?token=s3cret&agent=a%20b", headers=HTML)
            assert moved.status_code == 303
            assert moved.headers["location"] == "inbox?agent=a+b"
            assert "HttpOnly" in moved.headers["set-cookie"]
            assert (await c.get("/inbox", headers=HTML)).status_code == 200
        async with httpx.AsyncClient(base_url=url, timeout=30) as c:
            wrong = await c.get("/inbox?token=nope", headers=HTML)
            assert wrong.status_code == 401 and "set-cookie" not in wrong.headers
            # A non-browser SSE client may still use ?token= (the last resort).
            assert (await c.get("/runs?token=s3cret")).status_code == 200


async def test_mounted_under_a_path_the_guard_and_the_relative_links_still_hold(helix):
    from fastapi import FastAPI  # noqa: PLC0415 - only this test needs it

    parent = FastAPI()
    parent.mount("/agents", create_app(helix, authenticate=bearer_token("s3cret")))
    transport = httpx.ASGITransport(app=parent)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
        assert (await c.get("/agents/runs")).status_code == 401
        assert (await c.get("/agents/assets/inbox.js")).status_code == 200  # public
        form = await c.get("/agents/inbox", headers=HTML)
        assert form.status_code == 401 and 'action="sign-in"' in form.text
        moved = await c.get("/agents/inbox?token=s3cret", headers=HTML)
        assert moved.status_code == 303 and moved.headers["location"] == "inbox"
        assert (await c.get("/agents/runs")).status_code == 200  # with the cookie
        assert_security_headers(await c.get("/agents/runs"))


# --- 5. authentication before the body; deadlines; stream caps ------------------------


async def test_authentication_comes_before_the_body(helix):
    with serve(create_app(helix, authenticate=bearer_token("s3cret"))) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as c:
            bad_json = await c.post(
                "/start", content=b"{not json", headers={"Content-Type": "application/json"}
            )
            assert bad_json.status_code == 401, bad_json.text
            huge = await c.post("/start", content=b"x" * 2_000_000)
            assert huge.status_code == 401
            authed = await c.post(
                "/start",
                content=b"{not json",
                headers={"Content-Type": "application/json", "Authorization": "Bearer s3cret"},
            )
            assert authed.status_code == 422
        # An anonymous client announcing 1 MB and sending 10 bytes gets its 401 at once:
        # the server does not wait for (or hold) the rest.
        head = (
            b"POST /start HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000000\r\n\r\n" + b"0123456789"
        )
        answer = raw_request(url, head, wait=20)
        assert answer.startswith(b"HTTP/1.1 401"), answer[:200]


async def test_a_body_that_does_not_arrive_in_time_is_refused(helix):
    app = create_app(helix, authenticate=bearer_token("s3cret"), body_timeout_seconds=0.5)
    with serve(app) as url:
        slow = (
            b"POST /start HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer s3cret\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n" + b'{"agent": '
        )
        answer = raw_request(url, slow, wait=20)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert b"did not arrive within 0.5 seconds" in answer


def test_request_headers_that_do_not_arrive_in_time_close_the_connection(helix):
    """uvicorn waits for headers forever; `serve` uses this protocol (helix-dbos serve)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = create_app(helix, authenticate=bearer_token("s3cret"))
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", lifespan="off", http=with_header_timeout(0.3))
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.02)
        url = f"http://127.0.0.1:{port}"
        partial = raw_request(url, b"GET /runs HTTP/1.1\r\nHost: 127.0.0.1\r\n", wait=20)
        assert partial == b"", partial  # closed without an answer, not left open
        silent = raw_request(url, b"", wait=20)
        assert silent == b""
        full = raw_request(
            url, b"GET /runs HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        assert full.startswith(b"HTTP/1.1 401")  # complete requests are served as ever
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


async def test_sse_streams_are_capped_per_server_and_per_session(helix, make_agent, mock_llm):
    ran: list[str] = []
    agent = gated_agent(make_agent, mock_llm, ran, n=2)
    first = await helix.execute(agent, "rm a")
    second = await helix.execute(agent, "rm b")
    for handle in (first, second):
        await wait_until_waiting(helix, handle.session_id)
    app = create_app(
        helix,
        allow_unauthenticated=True,
        max_streams=2,
        max_streams_per_session=1,
        keepalive_seconds=0.2,
    )
    with serve(app) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as c:
            a = {"session_id": first.session_id}
            b = {"session_id": second.session_id}
            async with c.stream("GET", "/sse", params=a) as one:
                assert one.status_code == 200
                again = await c.get("/sse", params=a)
                assert again.status_code == 503 and "session" in again.json()["detail"]
                assert again.headers["retry-after"].isdigit()
                async with c.stream("GET", "/sse", params=b) as two:
                    assert two.status_code == 200
                    third = await c.get("/sse", params=b)
                    assert third.status_code == 503
            # Both closed: their slots are free again.
            for _ in range(100):
                if app.state.helix_server.streams.open == 0:
                    break
                await asyncio.sleep(0.05)
            async with c.stream("GET", "/sse", params=a) as reopened:
                assert reopened.status_code == 200
    await helix.abort(first.session_id)
    await helix.abort(second.session_id)


async def test_an_sse_stream_ends_at_its_lifetime_without_end(helix, make_agent, mock_llm):
    agent = gated_agent(make_agent, mock_llm, [])
    handle = await helix.execute(agent, "rm a")
    await wait_until_waiting(helix, handle.session_id)
    app = create_app(
        helix, allow_unauthenticated=True, keepalive_seconds=0.1, max_stream_seconds=0.5
    )
    params = {"session_id": handle.session_id}
    with serve(app) as url:
        async with (
            httpx.AsyncClient(base_url=url, timeout=30) as c,
            c.stream("GET", "/sse", params=params) as s,
        ):
            text = (await s.aread()).decode()
    assert "stream lifetime reached" in text
    assert "event: end" not in text  # an EventSource reconnects with Last-Event-ID
    assert app.state.helix_server.streams.open == 0
    await helix.abort(handle.session_id)


# --- 6. over-deep JSON; Host and Origin without auth ----------------------------------


async def test_over_deep_json_is_refused_at_the_edge_and_in_python(helix, make_agent, mock_llm):
    agent = make_agent()
    with serve(create_app(helix, allow_unauthenticated=True)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as c:
            deep = await c.post("/start", json={"agent": agent.name, "state": nest(500)})
            assert deep.status_code == 422, deep.text
            assert "nests deeper than 64 levels" in deep.json()["detail"]
            # A string full of brackets is not nesting.
            mock_llm.add_response({"type": "text", "content": "ok"}, agent=agent.name)
            brackets = await c.post("/start", json={"agent": agent.name, "input": "[{" * 500})
            assert brackets.status_code == 200, brackets.text
            await helix.get_session(brackets.json()["session_id"])
            mock_llm.add_response({"type": "text", "content": "ok"}, agent=agent.name)
            fine = await c.post("/start", json={"agent": agent.name, "state": nest(60)})
            assert fine.status_code == 200, fine.text
            session = fine.json()["session_id"]
            for _ in range(200):
                status = (await c.get("/status", params={"session_id": session})).json()
                if status["session"]["status"] == "completed":
                    break
                await asyncio.sleep(0.05)
            assert status["session"]["status"] == "completed"
    # The Python API refuses it too, rather than starting a run that would fail.
    with pytest.raises(InvalidInputError, match="more than 100 levels deep"):
        await helix.execute(agent, "hi", state=nest(500))


async def test_a_model_s_over_deep_arguments_cannot_fail_the_run(helix, make_agent, mock_llm):
    """A prompt-injected model replying with arguments nested 500 deep (which DBOS could
    not checkpoint: RecursionError, a failed run) has them cut at 100 levels."""
    from helix_dbos import ToolContext  # noqa: PLC0415 - only this test needs it

    @tool
    def remember(data: dict, ctx: ToolContext) -> str:
        """Remember something in the session state."""
        ctx.update_state({"data": data})
        return "ok"

    agent = make_agent(tools=[remember])
    mock_llm.add_responses(
        calls(("r1", "remember", {"data": nest(500)})),
        {"type": "text", "content": "done"},
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "remember this")).result()
    assert result.status == "completed", result.error
    with serve(create_app(helix, allow_unauthenticated=True)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as c:
            status = await c.get("/status", params={"session_id": result.session_id})
            assert status.status_code == 200, status.text
            messages = await c.get(f"/sessions/{result.session_id}/messages")
            assert messages.status_code == 200
    assert "[cut: nested more than 100 levels deep]" in json.dumps(status.json())


async def test_without_auth_only_local_hosts_and_same_origin_requests_are_served(helix):
    with serve(create_app(helix, allow_unauthenticated=True)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as c:
            assert (await c.get("/runs")).status_code == 200
            assert (await c.get("/runs", headers={"Host": "localhost:9"})).status_code == 200
            rebound = await c.get("/runs", headers={"Host": "attacker.example"})
            assert rebound.status_code == 421 and "attacker.example" in rebound.text
            for headers in (
                {"Origin": "http://attacker.example"},
                {"Sec-Fetch-Site": "cross-site"},
                {"Sec-Fetch-Site": "same-site"},
            ):
                forged = await c.post("/interrupt", json={"session_id": "x"}, headers=headers)
                assert forged.status_code == 403, headers
            same = await c.post(
                "/interrupt", json={"session_id": "ses_none"}, headers={"Origin": url}
            )
            assert same.status_code == 404
    app = create_app(helix, allow_unauthenticated=True, allowed_hosts=["agents.internal"])
    with serve(app) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as c:
            named = await c.get("/runs", headers={"Host": "agents.internal:8000"})
            assert named.status_code == 200
            assert (await c.get("/runs")).status_code == 421


def test_tokens_that_cannot_work_everywhere_are_refused():
    for token in ("", " ", "\t\n", "s3cret tok", "tök", "tok\x00"):
        with pytest.raises(ValueError):
            bearer_token(token)
    bearer_token("a/b+c=~!")


# --- 7. principals -------------------------------------------------------------------


async def test_a_principal_sees_only_its_own_sessions_and_is_who_answered(
    helix, make_agent, mock_llm, database_url
):
    def hook(request) -> Principal | bool:
        user = request.headers.get("x-user")
        if user in ("alice", "bob"):
            return Principal(user, sessions=lambda sid, u=user: sid.startswith(f"{u}-"))
        return request.headers.get("x-admin") == "yes"

    ran: list[str] = []
    agent = gated_agent(make_agent, mock_llm, ran, n=2)
    tag = agent.name[-8:]
    alice = {"x-user": "alice"}
    bob = {"x-user": "bob"}
    with serve(create_app(helix, authenticate=hook)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as c:
            started = {}
            for who, headers in (("alice", alice), ("bob", bob)):
                body = {"agent": agent.name, "input": "rm", "session_id": f"{who}-{tag}"}
                response = await c.post("/start", json=body, headers=headers)
                assert response.status_code == 200, response.text
                started[who] = response.json()
                await wait_until_waiting(helix, started[who]["session_id"])
            a_sid, b_sid = started["alice"]["session_id"], started["bob"]["session_id"]

            runs = (await c.get("/runs", params={"status": "waiting"}, headers=alice)).json()
            assert a_sid in {r["session_id"] for r in runs}
            assert b_sid not in {r["session_id"] for r in runs}
            admin = (await c.get("/runs?status=waiting", headers={"x-admin": "yes"})).json()
            assert {a_sid, b_sid} <= {r["session_id"] for r in admin}
            for method, path, kwargs in (
                ("GET", "/status", {"params": {"session_id": b_sid}}),
                ("GET", "/sse", {"params": {"session_id": b_sid}}),
                ("GET", f"/sessions/{b_sid}/messages", {}),
                ("GET", f"/sessions/{b_sid}/usage", {}),
                ("POST", "/interrupt", {"json": {"session_id": b_sid}}),
                ("POST", "/abort", {"json": {"session_id": b_sid}}),
                ("POST", "/resume", {"json": {"session_id": b_sid}}),
                (
                    "POST",
                    "/submit-tool-result",
                    {
                        "json": {
                            "session_id": b_sid,
                            "tool_call_id": "d1",
                            "kind": "approval-response",
                            "approved": True,
                        }
                    },
                ),
            ):
                denied = await c.request(method, path, headers=alice, **kwargs)
                assert denied.status_code == 404, (path, denied.text)
                assert "does not exist" in denied.json()["detail"]
            for body in ({"agent": agent.name}, {"agent": agent.name, "session_id": "bob-x"}):
                assert (await c.post("/start", json=body, headers=alice)).status_code == 403
            chat = {"context_id": "bob-y", "message": "hi", "agent": agent.name}
            assert (await c.post("/chat", json=chat, headers=alice)).status_code == 403

            # Alice answers her own call; she is who answered, whatever the body says.
            answer = {
                "session_id": a_sid,
                "tool_call_id": "d1",
                "kind": "approval-response",
                "approved": True,
                "answered_by": "mallory",
            }
            ok = await c.post("/submit-tool-result", json=answer, headers=alice)
            assert ok.status_code == 200, ok.text
            for _ in range(200):
                rows = (await c.get("/answered", headers=alice)).json()
                if any(r["session_id"] == a_sid for r in rows):
                    break
                await asyncio.sleep(0.05)
            assert {r["session_id"] for r in rows} == {a_sid}
            assert rows[0]["answered_by"] == "alice"
            assert (await c.get("/answered", headers=bob)).json() == []
            [(by,)] = sql(
                database_url,
                "SELECT answered_by FROM helix.tool_calls WHERE session_id = %s",
                a_sid,
            )
            assert by == "alice"
    await helix.abort(b_sid)


def test_principal_sessions_as_a_collection_or_a_predicate():
    assert Principal("a").may_see("anything")
    assert Principal("a", sessions={"s1"}).may_see("s1")
    assert not Principal("a", sessions={"s1"}).may_see("s2")
    assert not Principal("a", sessions=lambda s: 1).may_see("s1")  # only True admits
    assert json.dumps(Principal("a").name) == '"a"'
