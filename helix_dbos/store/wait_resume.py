"""Close a wait for a human in one statement: its calls resolved, its run running again.

The resume was a datasource transaction of four statements (each call's resolution,
the run, the session, the `run_resumed` chunk) and the datasource's own checkpoint
read and write, then one statement in a step of its own, on the drain of every waiting
run (benchmarks/bench_waiting_runs.py). It needs no checkpoint: workflow code sends it,
like the run's final write. Run again (a replay after a crash, at any later point of
the run), it changes nothing: a resolved call is no longer `pending`, and the run, its
session and the chunk are only touched when this very statement resolved a call, so a
replayed resume of an earlier wait leaves a run that waits again as it is. A fenced
execution's resume fails on the owner check and writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import TextClause, text

from helix_dbos.store.repository import (
    _INSERT_CHUNKS,
    OWNED,
    Owner,
    SQLConnection,
    _chunk_records,
    _json,
    owner_params,
)


class CallResolution(Protocol):
    """How one pending `helix.tool_calls` row is closed (`hitl.Resolution`)."""

    @property
    def tool_call_id(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def result(self) -> Any: ...
    @property
    def error(self) -> str | None: ...
    @property
    def reason(self) -> str | None: ...


@dataclass(frozen=True)
class WaitResumed:
    """What one `resume_wait` did: `resolved`, the calls this statement closed (none on
    a replay: they were closed already), and whether it resumed the run."""

    resumed: bool
    resolved: frozenset[str]


# The run is marked running only if this statement resolved a call and the run is
# still live (an abort may have ended it meanwhile); that update decides the rest: the
# session is marked running, and the chunk written (after the session's chunk counter,
# which this update also locks). The owner check comes first, so it is evaluated.
_RESUME: TextClause = text(
    "WITH a AS (SELECT * FROM jsonb_to_recordset(CAST(:calls AS jsonb)) "
    "AS a(tool_call_id text, status text, result jsonb, error text, reason text)), "
    "calls AS (UPDATE helix.tool_calls AS t SET status = a.status, result = a.result, "
    "error = a.error, reason = a.reason, resolved_at = now() FROM a "
    "WHERE t.run_id = :rid AND t.tool_call_id = a.tool_call_id AND t.status = 'pending' "
    "RETURNING t.tool_call_id), "
    "run AS (UPDATE helix.runs SET status = 'running', waiting_for = NULL, "
    "waiting_since = NULL WHERE run_id = :rid AND status IN ('running', 'waiting', 'paused') "
    "AND EXISTS (SELECT 1 FROM calls) RETURNING 1), "
    "s AS (UPDATE helix.sessions SET status = 'running', updated_at = now(), "
    "chunk_seq = chunk_seq + :nchunk WHERE session_id = :sid AND EXISTS (SELECT 1 FROM run) "
    "RETURNING chunk_seq - :nchunk AS chunk_base), "
    f"ins AS ({_INSERT_CHUNKS} RETURNING 1) "
    f"SELECT {OWNED} AND EXISTS (SELECT 1 FROM run), "
    "(SELECT pg_notify('helix_chunks', :sid) FROM s), "
    "ARRAY(SELECT tool_call_id FROM calls)"
)


async def resume_wait(
    conn: SQLConnection,
    session_id: str,
    run_id: str,
    agent_name: str,
    step: int,
    resolutions: Sequence[CallResolution],
    chunk: tuple[str, str, Any],
    owner: Owner | None = None,
) -> WaitResumed:
    """Resolve the calls still pending, and if any was and the run is live, mark it and
    its session running and write `chunk` (key, type, payload); says which calls this
    statement resolved and whether it resumed the run. `owner`: the execution that must still own the run's workflow
    (`HX001` otherwise). `_json` makes every text storable (a NUL, a lone surrogate)."""
    calls = [
        {
            "tool_call_id": r.tool_call_id,
            "status": r.status,
            "result": r.result,
            "error": r.error,
            "reason": r.reason,
        }
        for r in resolutions
    ]
    row = (
        await conn.execute(
            _RESUME,
            {
                "calls": _json(calls),
                "sid": session_id,
                "rid": run_id,
                "agent": agent_name,
                "step": step,
                "nchunk": 1,
                "chunks": _chunk_records([chunk]),
                **owner_params(owner),
            },
        )
    ).first()
    if row is None:
        return WaitResumed(False, frozenset())
    return WaitResumed(bool(row[0]), frozenset(row[2] or ()))
