"""SQL of remote sub-agents (`helix.remote_children`, migration 0015).

One row per call of a remote sub-agent tool, keyed by the parent's run and call id, so
every write here is a no-op or a plain overwrite on replay. The remote child's chunks
are copied into the parent's session stream keyed by the remote seq, and the row's
`last_seq` moves with them in the same statement: a resumed proxy starts after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text

from helix_dbos.store.repository import OWNED, Owner, SQLConnection, owner_params
from helix_dbos.store.storable import dumps


@dataclass(frozen=True)
class RemoteRef:
    """Where a remote child runs and for which parent call (the row's identity)."""

    parent_session_id: str
    parent_run_id: str
    parent_workflow_id: str
    parent_agent_name: str
    step: int
    tool_call_id: str
    tool_name: str
    url: str
    agent_name: str
    remote_session_id: str
    idempotency_key: str
    input: str
    # The parent's tenant, sent with the start request: the child counts against it.
    tenant: str | None = None


@dataclass(frozen=True)
class RemoteChildRow:
    remote_run_id: str | None
    status: str
    last_seq: int
    created_at: datetime


@dataclass(frozen=True)
class LiveRemoteChild:
    """A remote child still running below a session, for abort and interrupt."""

    parent_agent_name: str
    tool_name: str
    url: str
    remote_session_id: str
    remote_run_id: str | None = None  # an A2A child's task id, once started


_KEY = "parent_run_id = :rid AND tool_call_id = :tcid"
# Each write below is made by the parent run's workflow (its `remote_start`/`remote_wait`
# steps) with the execution's `owner`: a fenced execution's raises `HX001` and lands
# nothing (`OWNED`; None, from outside a workflow, checks nothing).


async def open_ref(conn: SQLConnection, ref: RemoteRef, owner: Owner | None = None) -> None:
    await conn.execute(
        text(
            "INSERT INTO helix.remote_children (parent_run_id, tool_call_id, parent_session_id, "
            "parent_agent_name, tool_name, url, agent_name, remote_session_id) "
            f"SELECT :rid, :tcid, :sid, :pagent, :tool, :url, :agent, :rsid WHERE {OWNED} "
            "ON CONFLICT (parent_run_id, tool_call_id) DO NOTHING"
        ),
        {
            **owner_params(owner),
            "rid": ref.parent_run_id,
            "tcid": ref.tool_call_id,
            "sid": ref.parent_session_id,
            "pagent": ref.parent_agent_name,
            "tool": ref.tool_name,
            "url": ref.url,
            "agent": ref.agent_name,
            "rsid": ref.remote_session_id,
        },
    )


async def get_ref(
    conn: SQLConnection, parent_run_id: str, tool_call_id: str
) -> RemoteChildRow | None:
    row = (
        await conn.execute(
            text(
                "SELECT remote_run_id, status, last_seq, created_at FROM helix.remote_children "
                f"WHERE {_KEY}"
            ),
            {"rid": parent_run_id, "tcid": tool_call_id},
        )
    ).first()
    return RemoteChildRow(*row) if row is not None else None


async def mark_started(
    conn: SQLConnection,
    parent_run_id: str,
    tool_call_id: str,
    remote_run_id: str,
    owner: Owner | None = None,
) -> None:
    await conn.execute(
        text(
            "UPDATE helix.remote_children SET remote_run_id = :rrid, status = 'running', "
            f"updated_at = now() WHERE {OWNED} AND {_KEY} AND status IN ('starting', 'running')"
        ),
        {
            "rid": parent_run_id,
            "tcid": tool_call_id,
            "rrid": remote_run_id,
            **owner_params(owner),
        },
    )


async def finish(
    conn: SQLConnection,
    parent_run_id: str,
    tool_call_id: str,
    status: str,
    error: str | None,
    tokens: tuple[int, int] | None = None,
    owner: Owner | None = None,
) -> None:
    await conn.execute(
        text(
            "UPDATE helix.remote_children SET status = :status, error = :error, "
            "input_tokens = :inp, output_tokens = :outp, updated_at = now() "
            f"WHERE {OWNED} AND {_KEY}"
        ),
        {
            **owner_params(owner),
            "rid": parent_run_id,
            "tcid": tool_call_id,
            "status": status,
            "error": error,
            "inp": tokens[0] if tokens else None,
            "outp": tokens[1] if tokens else None,
        },
    )


@dataclass(frozen=True)
class ProxiedChunk:
    """A remote chunk as it lands in the parent's stream."""

    seq: int  # the remote seq: the copy's key, and the proxy's resume point
    session_id: str  # the remote session it happened in
    run_id: str | None
    agent_name: str | None
    step: int | None
    type: str
    payload: dict[str, Any]


async def proxy_chunk(
    conn: SQLConnection, ref: RemoteRef, chunk: ProxiedChunk, owner: Owner | None = None
) -> None:
    """Copy one remote chunk into the parent's session stream (named by its remote
    session, run and agent, reaching the parent's run) and move `last_seq`; keyed, so a
    resumed proxy that sends it again inserts nothing."""
    await conn.execute(
        text(
            "WITH s AS (UPDATE helix.sessions SET chunk_seq = chunk_seq + 1 "
            f"WHERE session_id = :sid AND {OWNED} RETURNING chunk_seq AS seq), "
            "ins AS (INSERT INTO helix.stream_chunks (session_id, seq, chunk_key, run_id, "
            "agent_name, step, type, payload, source_session_id, via_run_id) "
            "SELECT :sid, s.seq, :key, :crid, :cagent, :cstep, :ctype, CAST(:payload AS jsonb), "
            ":csid, :rid FROM s ON CONFLICT (chunk_key) DO NOTHING RETURNING 1), "
            "moved AS (UPDATE helix.remote_children SET last_seq = GREATEST(last_seq, :cseq) "
            f"WHERE {_KEY} RETURNING 1) "
            "SELECT pg_notify('helix_chunks', :sid) FROM (SELECT count(*) FROM moved) m"
        ),
        {
            **owner_params(owner),
            "sid": ref.parent_session_id,
            "rid": ref.parent_run_id,
            "tcid": ref.tool_call_id,
            "key": f"remote:{ref.parent_run_id}:{ref.tool_call_id}:{chunk.seq}",
            "crid": chunk.run_id,
            "cagent": chunk.agent_name,
            "cstep": chunk.step,
            "ctype": chunk.type,
            "payload": dumps(chunk.payload),
            "csid": chunk.session_id,
            "cseq": chunk.seq,
        },
    )


async def live_below(conn: SQLConnection, session_id: str) -> list[LiveRemoteChild]:
    """The remote children still running for the session or any session below it."""
    rows = await conn.execute(
        text(
            "WITH RECURSIVE tree AS (SELECT CAST(:sid AS text) AS session_id UNION "
            "SELECT s.session_id FROM helix.sessions s JOIN tree t "
            "ON s.parent_session_id = t.session_id) "
            "SELECT parent_agent_name, tool_name, url, remote_session_id, remote_run_id "
            "FROM helix.remote_children WHERE parent_session_id IN (SELECT session_id FROM tree) "
            "AND status IN ('starting', 'running') ORDER BY created_at"
        ),
        {"sid": session_id},
    )
    return [LiveRemoteChild(*row) for row in rows]
