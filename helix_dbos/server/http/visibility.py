"""Which sessions a principal may see: its own (as its `authenticate` hook says) and the
sub-agent sessions below them. A session it may not see answers as an unknown one (404),
so a principal learns nothing about other principals' sessions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import HTTPException

from helix_dbos.errors import SessionNotFoundError
from helix_dbos.server.http.auth import Principal
from helix_dbos.server.http.route_context import ServerContext

MAX_PARENT_HOPS = 64


async def sees(ctx: ServerContext, principal: Principal, session_id: str) -> bool:
    if principal.may_see(session_id):
        return True
    current = session_id
    for _ in range(MAX_PARENT_HOPS):  # a sub-agent's session goes with its root's
        try:
            parent = (await ctx.helix.get_session(current)).parent_session_id
        except SessionNotFoundError:
            return False
        if parent is None:
            return False
        if principal.may_see(parent):
            return True
        current = parent
    return False


async def require_visible(ctx: ServerContext, principal: Principal, *ids: str | None) -> None:
    """404 for a session the principal may not see, as for one that does not exist."""
    if principal.sees_everything:
        return
    for session_id in ids:
        if session_id is not None and not await sees(ctx, principal, session_id):
            raise SessionNotFoundError(session_id)


def require_own_new_session(principal: Principal, session_id: str | None) -> None:
    """A principal limited to some sessions starts runs only in sessions it may see."""
    if principal.sees_everything:
        return
    if session_id is None:
        raise HTTPException(
            status_code=403,
            detail=f"{principal.name or 'this principal'} may only use its own sessions: "
            "pass a session_id it may see",
        )
    if not principal.may_see(session_id):
        raise HTTPException(
            status_code=403,
            detail=f"{principal.name or 'this principal'} may not use session '{session_id}'",
        )


async def visible_rows(
    ctx: ServerContext, principal: Principal, rows: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """The rows (each with a `session_id`) of sessions the principal may see."""
    if principal.sees_everything:
        return list(rows)
    seen: dict[str, bool] = {}
    kept = []
    for row in rows:
        sid = row["session_id"]
        if sid not in seen:
            seen[sid] = await sees(ctx, principal, sid)
        if seen[sid]:
            kept.append(row)
    return kept
