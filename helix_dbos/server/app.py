"""`create_app(helix)`: the HTTP API, the SSE stream and the approvals inbox on FastAPI.

DBOS is launched in the app's lifespan when the application has not launched
it already, so it adopts the server's event loop and all helix database work
runs there. Authentication is fail-closed: construction raises unless an
`authenticate` hook is given or `allow_unauthenticated=True` says otherwise.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from helix_dbos.runtime import dbos_internals
from helix_dbos.runtime.executor import HelixDBOS
from helix_dbos.server import chat, inbox, reads, routes
from helix_dbos.server.auth import Authenticate, auth_dependency, check_auth_config
from helix_dbos.server.context import ServerContext
from helix_dbos.server.errors import install_error_handlers

# Room for the JSON around a maximal tool result.
BODY_OVERHEAD_BYTES = 64 * 1024


def dbos_launched() -> bool:
    return dbos_internals.is_launched()


def create_app(
    helix: HelixDBOS,
    *,
    authenticate: Authenticate | None = None,
    allow_unauthenticated: bool = False,
    default_agent: str | None = None,
    max_id_length: int = 200,
    max_result_bytes: int = 1_000_000,
    keepalive_seconds: float = 15.0,
    title: str = "helix_dbos",
) -> FastAPI:
    """The agent server for `helix`.

    `authenticate(request)` returns True (or an awaitable of True) to admit a
    request; every route, the inbox page included, runs it. `default_agent` is
    the agent the chat endpoints use when a request names none.
    """
    check_auth_config(authenticate, allow_unauthenticated)
    if default_agent is not None and default_agent not in helix.agents:
        raise ValueError(
            f"default_agent '{default_agent}' is not registered "
            f"(registered: {', '.join(sorted(helix.agents)) or 'none'})"
        )
    if max_id_length < 1 or max_result_bytes < 1:
        raise ValueError("max_id_length and max_result_bytes must be positive")
    ctx = ServerContext(
        helix=helix,
        default_agent=default_agent,
        max_id_length=max_id_length,
        max_result_bytes=max_result_bytes,
        keepalive_seconds=keepalive_seconds,
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        launched_here = not dbos_launched()
        if launched_here:
            helix.launch()  # on this loop, so DBOS adopts it as its target loop
        try:
            yield
        finally:
            if launched_here:
                await helix.shutdown_async()

    app = FastAPI(
        title=title,
        description="Durable LLM agents on DBOS: start runs, stream them, answer approvals.",
        lifespan=lifespan,
        dependencies=[Depends(auth_dependency(authenticate))],
    )
    app.state.helix_server = ctx
    install_error_handlers(app)
    app.include_router(routes.build_router(ctx))
    app.include_router(chat.build_router(ctx))
    app.include_router(reads.build_router(ctx))
    app.include_router(inbox.build_router(ctx))
    inbox.install_sign_in(app)
    app.add_middleware(BodyLimit, max_bytes=max_result_bytes + BODY_OVERHEAD_BYTES)
    return app


class BodyLimit:
    """413 for a body over the limit: at once for a declared Content-Length, and on the
    bytes read for any other (a chunked body cannot slip past it)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await self._reject(send, int(length))
            return
        received = 0
        rejected = False

        async def counting_receive() -> Message:
            nonlocal received, rejected
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    if not rejected:
                        rejected = True
                        await self._reject(send, received, at_least=True)
                    return {"type": "http.disconnect"}  # the app stops reading
            return message

        async def guarded_send(message: Message) -> None:
            if not rejected:  # after the 413, nothing the app says goes out
                await send(message)

        try:
            await self.app(scope, counting_receive, guarded_send)
        except Exception:
            if not rejected:
                raise

    async def _reject(self, send: Send, size: int, *, at_least: bool = False) -> None:
        size_text = f"more than {self.max_bytes}" if at_least else str(size)
        await _send_json(
            send,
            413,
            {"detail": f"Request body is {size_text} bytes; the limit is {self.max_bytes}"},
        )


async def _send_json(send: Send, status: int, body: dict[str, Any]) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
