"""SQL over `helix.companions`: a parent's named persistent children (migration 0007)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from helix_dbos.store import repository as repo
from helix_dbos.store.repository import RunRow, SQLConnection, _sql
from helix_dbos.store.storable import dumps

_ENDED = "('completed', 'failed', 'interrupted', 'aborted')"


@dataclass(frozen=True)
class CompanionRef:
    name: str
    session_id: str
    agent_name: str
    mode: str


@dataclass(frozen=True)
class LiveChild:
    session_id: str
    run_id: str
    workflow_id: str
    waits: tuple[str, ...]


@dataclass(frozen=True)
class ChildEnd:
    name: str
    agent_name: str
    run_id: str
    status: str
    output: Any
    error: str | None


async def find(
    conn: SQLConnection, parent_session_id: str, name: str | None
) -> CompanionRef | None:
    row = (
        await conn.execute(
            _sql(
                "SELECT name, session_id, agent_name, mode FROM helix.companions "
                "WHERE parent_session_id = :sid AND name = :name"
            ),
            {"sid": parent_session_id, "name": name},
        )
    ).first()
    return CompanionRef(*row) if row else None


async def find_or_create(
    conn: SQLConnection,
    parent_session_id: str,
    agent_type: str | None,
    name: str | None,
    *,
    mode: str,
    state: dict[str, Any],
    create: bool,
) -> CompanionRef | str:
    """The named child (an error text when there is none and `create` is off). A new
    child is named `<agentType>-<n>` unless named, in session `{parent}-agent-{name}`."""
    if not create or agent_type is None:
        found = await find(conn, parent_session_id, name)
        return found or f"No child named '{name}'"
    root = await repo.session_root(conn, parent_session_id)
    if name is None:
        return await _create_auto_named(conn, parent_session_id, agent_type, mode, state, root)
    found = await find(conn, parent_session_id, name)
    if found is not None:
        if found.agent_name != agent_type:
            return f"Child '{name}' is a '{found.agent_name}', not a '{agent_type}'"
        return found
    session_id = f"{parent_session_id}-agent-{name}"
    await repo.insert_session(
        conn,
        session_id,
        agent_type,
        state,
        parent_session_id=parent_session_id,
        root_session_id=root,
    )
    await conn.execute(
        _sql(
            "INSERT INTO helix.companions (parent_session_id, name, session_id, agent_name, mode) "
            "VALUES (:sid, :name, :child, :agent, :mode)"
        ),
        {
            "sid": parent_session_id,
            "name": name,
            "child": session_id,
            "agent": agent_type,
            "mode": mode,
        },
    )
    return CompanionRef(name, session_id, agent_type, mode)


# Picks `<agentType>-<n>` with the smallest n no child of the parent is named (explicitly
# or not: count + 1 candidates always hold a free one) and creates the child's session
# and row, in one statement. A concurrent spawn that picked the same name first makes
# both inserts do nothing (they wait for it to commit): the caller picks again.
_AUTO_NAMED = (
    "WITH taken AS (SELECT name FROM helix.companions WHERE parent_session_id = :sid), "
    "pick AS (SELECT CAST(:agent AS text) || '-' || n AS name "
    "FROM generate_series(1, (SELECT count(*) FROM taken) + 1) AS n "
    "WHERE CAST(:agent AS text) || '-' || n NOT IN (SELECT name FROM taken) "
    "ORDER BY n LIMIT 1), "
    "child AS (INSERT INTO helix.sessions (session_id, agent_name, state, parent_session_id, "
    "root_session_id) SELECT :sid || '-agent-' || pick.name, :agent, CAST(:state AS jsonb), "
    ":sid, :root FROM pick ON CONFLICT DO NOTHING) "
    "INSERT INTO helix.companions (parent_session_id, name, session_id, agent_name, mode) "
    "SELECT :sid, pick.name, :sid || '-agent-' || pick.name, :agent, :mode FROM pick "
    "ON CONFLICT DO NOTHING RETURNING name, session_id"
)
_AUTO_NAME_ATTEMPTS = 100


async def _create_auto_named(
    conn: SQLConnection,
    parent_session_id: str,
    agent_type: str,
    mode: str,
    state: dict[str, Any],
    root: str,
) -> CompanionRef:
    params = {
        "sid": parent_session_id,
        "agent": agent_type,
        "mode": mode,
        "state": dumps(state),
        "root": root,
    }
    for _ in range(_AUTO_NAME_ATTEMPTS):
        row = (await conn.execute(_sql(_AUTO_NAMED), params)).first()
        if row is not None:
            return CompanionRef(row[0], row[1], agent_type, mode)
    raise RuntimeError(f"no free name for a new '{agent_type}' child of '{parent_session_id}'")


_STATUS = (
    "SELECT c.name, c.agent_name, c.mode, s.status, s.output, s.error, c.session_id "
    "FROM helix.companions c JOIN helix.sessions s ON s.session_id = c.session_id "
    "WHERE c.parent_session_id = :sid"
)


async def children_status(
    conn: SQLConnection, parent_session_id: str, name: str | None
) -> dict[str, Any] | list[dict[str, Any]] | str:
    """Every child (`name` None: listChildren) or one child with its output or error."""
    if name is None:
        rows = await conn.execute(
            _sql(_STATUS + " ORDER BY c.created_at, c.name"), {"sid": parent_session_id}
        )
        return [
            {"name": r[0], "agent_type": r[1], "mode": r[2], "status": r[3], "session_id": r[6]}
            for r in rows
        ]
    row = (
        await conn.execute(
            _sql(_STATUS + " AND c.name = :name"), {"sid": parent_session_id, "name": name}
        )
    ).first()
    if row is None:
        return f"No child named '{name}'"
    status: dict[str, Any] = {"name": row[0], "agent_type": row[1], "status": row[3]}
    if row[3] == "completed":
        status["output"] = row[4]
    elif row[5]:
        status["error"] = row[5]
    return status


async def live_child(
    conn: SQLConnection, parent_session_id: str, name: str | None
) -> LiveChild | str:
    ref = await find(conn, parent_session_id, name)
    if ref is None:
        return f"No child named '{name}'"
    run = await repo.get_live_run(conn, ref.session_id)
    if run is None:
        return f"Child '{name}' is not running"
    waits = tuple(await repo.pending_kinds(conn, run.run_id))
    return LiveChild(ref.session_id, run.run_id, run.workflow_id, waits)


async def live_children(
    conn: SQLConnection, parent_session_id: str, parent_run_id: str, agent_names: list[str]
) -> list[LiveChild]:
    """The parent's children of these agents whose live run that parent run opened."""
    rows = await conn.execute(
        _sql(
            "SELECT c.session_id, r.run_id, r.workflow_id FROM helix.companions c "
            "JOIN helix.runs r ON r.session_id = c.session_id "
            "WHERE c.parent_session_id = :sid AND c.agent_name = ANY(:agents) "
            "AND r.status IN ('running', 'waiting', 'paused') "
            "AND r.options->>'parent_run_id' = :rid ORDER BY c.name"
        ),
        {"sid": parent_session_id, "rid": parent_run_id, "agents": agent_names},
    )
    return [
        LiveChild(session_id, run_id, workflow_id, tuple(await repo.pending_kinds(conn, run_id)))
        for session_id, run_id, workflow_id in rows.all()
    ]


async def latest_run(conn: SQLConnection, session_id: str) -> RunRow | None:
    runs = await repo.list_runs(conn, session_id)
    return runs[-1] if runs else None


async def unannounced_ends(conn: SQLConnection, parent_session_id: str) -> list[ChildEnd]:
    """Non-blocking children whose latest turn ended since the parent was last told,
    marked told in the same statement."""
    rows = await conn.execute(
        _sql(
            "WITH latest AS (SELECT DISTINCT ON (r.session_id) r.session_id, r.run_id, "
            "r.status, r.output, r.error FROM helix.runs r JOIN helix.companions c "
            "ON c.session_id = r.session_id WHERE c.parent_session_id = :sid "
            "AND c.mode = 'non_blocking' ORDER BY r.session_id, r.turn DESC) "
            "UPDATE helix.companions c SET notified_run_id = l.run_id FROM latest l "
            f"WHERE l.session_id = c.session_id AND l.status IN {_ENDED} "
            "AND c.notified_run_id IS DISTINCT FROM l.run_id "
            "RETURNING c.name, c.agent_name, l.run_id, l.status, l.output, l.error"
        ),
        {"sid": parent_session_id},
    )
    return sorted((ChildEnd(*r) for r in rows), key=lambda e: e.name)
