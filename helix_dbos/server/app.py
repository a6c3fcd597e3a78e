"""`create_app(helix)`: the HTTP API, the SSE stream and the approvals inbox on FastAPI.

DBOS is launched in the app's lifespan when the application has not launched
it already, so it adopts the server's event loop and all helix database work
runs there. Authentication is fail-closed: construction raises unless an
`authenticate` hook is given or `allow_unauthenticated=True` says otherwise.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

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
                await asyncio.to_thread(helix.shutdown)

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
    app.include_router(inbox.build_router())
    app.add_middleware(BodyLimit, max_bytes=max_result_bytes + BODY_OVERHEAD_BYTES)
    return app


class BodyLimit:
    """413 for a declared Content-Length over the limit, before the body is read."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            length = dict(scope["headers"]).get(b"content-length")
            if length is not None and length.isdigit() and int(length) > self.max_bytes:
                await _send_json(
                    send,
                    413,
                    {
                        "detail": f"Request body is {int(length)} bytes; the limit is {self.max_bytes}"
                    },
                )
                return
        await self.app(scope, receive, send)


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
