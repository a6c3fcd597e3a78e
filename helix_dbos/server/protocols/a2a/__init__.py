"""A2A 1.0 (the `a2a-sdk` package, extra `a2a`): each agent served at `/a2a/{agent}`
with its agent card, and A2A agents as remote sub-agents (`remote_sub_agent_tool(...,
protocol="a2a")`, whose wire is in `a2a_wire/`). docs/protocols/a2a.md has the mapping."""

from __future__ import annotations

import importlib.util

from fastapi import FastAPI

from helix_dbos.server.http.route_context import ServerContext


def available() -> bool:
    return importlib.util.find_spec("a2a") is not None


def mount(app: FastAPI, ctx: ServerContext) -> None:
    """Add the A2A routes to `app` when `a2a-sdk` is installed (a no-op otherwise)."""
    if available():
        from helix_dbos.server.protocols.a2a import routes  # noqa: PLC0415 - needs a2a-sdk

        app.include_router(routes.build_router(ctx))
