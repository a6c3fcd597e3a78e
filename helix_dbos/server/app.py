"""`create_app(helix)`: the HTTP API, the SSE stream and the approvals inbox on FastAPI.

DBOS is launched in the app's lifespan when the application has not launched
it already, so it adopts the server's event loop and all helix database work
runs there. Authentication is fail-closed: construction raises unless an
`authenticate` hook is given or `allow_unauthenticated=True` says otherwise. The edge
guard (`edge.py`) runs before any route: Host and Origin checks, authentication before
the body is read, the body's limits, and the security headers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from fastapi import FastAPI

from helix_dbos.facade.helix import HelixDBOS
from helix_dbos.runtime.dbos import dbos_internals
from helix_dbos.server import assets, inbox, timeline
from helix_dbos.server.endpoints import chat
from helix_dbos.server.endpoints import checkpoint_routes as checkpoints
from helix_dbos.server.endpoints import read_routes as reads
from helix_dbos.server.endpoints import run_routes as routes
from helix_dbos.server.endpoints import schedule_routes as schedules
from helix_dbos.server.http.auth import Authenticate, check_auth_config
from helix_dbos.server.http.body import BodyLimits
from helix_dbos.server.http.edge import LOCAL_HOSTS, EdgeGuard, EdgePolicy
from helix_dbos.server.http.error_responses import install_error_handlers
from helix_dbos.server.http.route_context import ServerContext
from helix_dbos.server.http.streams import StreamSlots
from helix_dbos.server.protocols import a2a, ag_ui, ai_sdk

# Room for the JSON around a maximal tool result.
BODY_OVERHEAD_BYTES = 64 * 1024


def dbos_launched() -> bool:
    return dbos_internals.is_launched()


def create_app(
    helix: HelixDBOS,
    *,
    authenticate: Authenticate | None = None,
    allow_unauthenticated: bool = False,
    allowed_hosts: Sequence[str] | None = None,
    default_agent: str | None = None,
    max_id_length: int = 200,
    max_result_bytes: int = 1_000_000,
    max_json_depth: int = 64,
    body_timeout_seconds: float = 30.0,
    keepalive_seconds: float = 15.0,
    max_streams: int = 256,
    max_streams_per_session: int = 16,
    max_stream_seconds: float = 3600.0,
    cookie_max_age_seconds: int = 12 * 3600,
    api_docs: bool = True,
    title: str = "helix_dbos",
    mcp_agents: bool | Sequence[str] = False,
) -> FastAPI:
    """The agent server for `helix`.

    `authenticate(request)` returns True or a `Principal` (or an awaitable of either) to
    admit a request; every route but the sign-in form, its assets and the API docs runs
    it, before the body is read. `default_agent` is the agent the chat endpoints use when
    a request names none. Without authentication, only requests whose Host is in
    `allowed_hosts` (default: localhost, 127.0.0.1, ::1) and that come from no other
    origin are served (DNS rebinding, cross-site requests). `mcp_agents` (True: every
    agent; or names) serves agents as MCP tools at /mcp (extra `mcp`; docs/protocols/mcp.md).
    """
    check_auth_config(authenticate, allow_unauthenticated)
    if default_agent is not None and default_agent not in helix.agents:
        raise ValueError(
            f"default_agent '{default_agent}' is not registered "
            f"(registered: {', '.join(sorted(helix.agents)) or 'none'})"
        )
    if min(max_id_length, max_result_bytes, max_json_depth) < 1:
        raise ValueError("max_id_length, max_result_bytes and max_json_depth must be positive")
    if min(body_timeout_seconds, max_stream_seconds, cookie_max_age_seconds) <= 0:
        raise ValueError(
            "body_timeout_seconds, max_stream_seconds and cookie_max_age_seconds must be positive"
        )
    ctx = ServerContext(
        helix=helix,
        default_agent=default_agent,
        max_id_length=max_id_length,
        max_result_bytes=max_result_bytes,
        keepalive_seconds=keepalive_seconds,
        authenticate=authenticate,
        cookie_max_age=cookie_max_age_seconds,
        streams=StreamSlots(max_streams, max_streams_per_session),
        max_stream_seconds=max_stream_seconds,
    )
    unauthenticated = authenticate is None
    if allowed_hosts is None and unauthenticated:
        allowed_hosts = LOCAL_HOSTS
    policy = EdgePolicy(
        authenticate=authenticate,
        body=BodyLimits(
            max_bytes=max_result_bytes + BODY_OVERHEAD_BYTES,
            timeout_seconds=body_timeout_seconds,
            max_json_depth=max_json_depth,
        ),
        allowed_hosts=tuple(allowed_hosts) if allowed_hosts is not None else None,
        same_origin_only=unauthenticated,
        cookie_max_age=cookie_max_age_seconds,
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
        docs_url=None,  # served from the package's own assets (assets.py): no CDN
        redoc_url=None,
        openapi_url="/openapi.json" if api_docs else None,
    )
    app.state.helix_server = ctx
    install_error_handlers(app)
    app.include_router(routes.build_router(ctx))
    app.include_router(chat.build_router(ctx))
    app.include_router(reads.build_router(ctx))
    app.include_router(checkpoints.build_router(ctx))
    app.include_router(schedules.build_router(ctx))  # scheduled agents (issue 34)
    app.include_router(inbox.build_router(ctx))
    app.include_router(ag_ui.build_router(ctx))
    app.include_router(timeline.build_router())
    app.include_router(ai_sdk.build_router(ctx))
    app.include_router(assets.build_router(title, api_docs=api_docs))
    a2a.mount(app, ctx)  # A2A 1.0 at /a2a/{agent}, when a2a-sdk is installed
    if mcp_agents:  # the extra `mcp`, imported only when asked for
        from helix_dbos.server.protocols.mcp_server import mount_mcp  # noqa: PLC0415

        mount_mcp(app, ctx, mcp_agents)
    app.add_middleware(EdgeGuard, policy=policy)
    return app
