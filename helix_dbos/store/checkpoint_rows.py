"""Checkpoints (issue 30): reading them, forking a session from one, pruning old ones.

A checkpoint covers its session's messages up to `message_seq`. Most step checkpoints are
derived at read time from the step's messages and usage (migration 0030, issue 48's cut
4); the others are `helix.checkpoints` rows, written by the `helix.runs` trigger in the
statement that commits a step's rows (no round trip of their own): a step that wrote a
state, a run's first write, a head, a run's last step, a step without messages, a fork.
`helix.session_checkpoints` lists both, each with its id, the state in effect and the
usage so far. Everything here reads one session's through the functions behind that view
(migration 0032): `helix.session_checkpoints_of` (a session's), `helix.session_checkpoint`
(one by id, computed alone from the session's rows up to it) and
`helix.checkpoint_timeline_of` (with prune's columns).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from helix_dbos.orchestration.types import Message
from helix_dbos.store.repository import (
    MESSAGE_COLUMNS,
    SQLConnection,
    _json,
    _message_from_row,
    _sql,
)
from helix_dbos.store.storable import storable_text

USAGE_COLUMNS = (
    "llm_calls",
    "tool_calls",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "subagent_calls",
)
_LIVE = "('running', 'waiting', 'paused')"


@dataclass(frozen=True)
class CheckpointRow:
    checkpoint_id: str
    session_id: str
    run_id: str | None
    step: int
    kind: str
    message_seq: int
    state: dict[str, Any]
    usage: dict[str, int]
    created_at: datetime


# The checkpoint with its id and its state resolved (the view of migration 0013).
_COLUMNS = (
    "SELECT c.checkpoint_id, c.session_id, c.run_id, c.step, c.kind, c.message_seq, "
    "COALESCE(c.state, '{}'::jsonb), "
    + ", ".join(f"c.{col}" for col in USAGE_COLUMNS)
    + ", c.created_at "
)
_LIST = _sql(_COLUMNS + "FROM helix.session_checkpoints_of(:sid) c ORDER BY c.ord")
_GET = _sql(_COLUMNS + "FROM helix.session_checkpoint(:sid, :cid) c")


def _row(row: Any) -> CheckpointRow:
    n = len(USAGE_COLUMNS)
    usage = {k: int(v) for k, v in zip(USAGE_COLUMNS, row[7 : 7 + n], strict=True)}
    return CheckpointRow(
        checkpoint_id=row[0],
        session_id=row[1],
        run_id=row[2],
        step=int(row[3]),
        kind=row[4],
        message_seq=int(row[5]),
        state=dict(row[6] or {}),
        usage=usage,
        created_at=row[7 + n],
    )


async def list_checkpoints(conn: SQLConnection, session_id: str) -> list[CheckpointRow]:
    """The session's checkpoints, oldest first."""
    rows = await conn.execute(_LIST, {"sid": session_id})
    return [_row(r) for r in rows]


async def get_checkpoint(
    conn: SQLConnection, session_id: str, checkpoint_id: str
) -> CheckpointRow | None:
    row = (await conn.execute(_GET, {"sid": session_id, "cid": checkpoint_id})).first()
    return _row(row) if row else None


async def messages_until(conn: SQLConnection, session_id: str, message_seq: int) -> list[Message]:
    """The transcript as a checkpoint saw it: the messages with seq <= `message_seq`."""
    rows = await conn.execute(
        _sql(
            f"SELECT {MESSAGE_COLUMNS} FROM helix.messages "
            "WHERE session_id = :sid AND seq <= :top ORDER BY seq"
        ),
        {"sid": session_id, "top": message_seq},
    )
    return [_message_from_row(r)[1] for r in rows]


# A new session with the checkpoint's history and state, in one statement that reads the
# source with a plain snapshot (no lock on its rows, so a run of the source goes on
# undisturbed). A tool call without its result in that history (a checkpoint taken while
# the run waited) is paired with an error result, so the invariant holds in the fork.
# The fork's own first checkpoint ('fork') lets a fork of the fork start at its root.
_FORK = _sql(
    "WITH src AS (SELECT c.message_seq, c.state FROM helix.session_checkpoint(:src, :cid) c), "
    "ses AS (SELECT agent_name FROM helix.sessions WHERE session_id = :src), "
    "copied AS (SELECT m.* FROM helix.messages m, src WHERE m.session_id = :src "
    "AND m.seq <= src.message_seq), "
    "top AS (SELECT COALESCE(max(seq), 0) AS top FROM copied), "
    "d AS (SELECT c.call ->> 'id' AS id, c.call ->> 'name' AS name, "
    "row_number() OVER (ORDER BY m.seq, c.ord) AS ord FROM copied m, "
    "jsonb_array_elements(m.tool_calls) WITH ORDINALITY AS c(call, ord) "
    "WHERE m.role = 'assistant' AND jsonb_typeof(m.tool_calls) = 'array' "
    "AND NOT EXISTS (SELECT 1 FROM copied t WHERE t.role = 'tool' "
    "AND t.tool_call_id = c.call ->> 'id')), "
    "n AS (SELECT top.top + (SELECT count(*) FROM d) AS last, "
    "COALESCE(CAST(:state AS jsonb), src.state, '{}'::jsonb) AS state, "
    "nextval('helix.checkpoint_ord') AS ord FROM top, src), "
    "s AS (INSERT INTO helix.sessions (session_id, agent_name, state, status, turn_count, "
    "message_seq, chunk_seq, forked_from_session_id, forked_from_checkpoint_id) "
    "SELECT :new, ses.agent_name, n.state, 'idle', 0, n.last, 0, :src, :cid "
    "FROM ses, n ON CONFLICT (session_id) DO NOTHING RETURNING 1), "
    "msg AS (INSERT INTO helix.messages (session_id, seq, run_id, role, content, tool_calls, "
    "tool_call_id, tool_name, thinking, is_error, parts, created_at) SELECT :new, seq, NULL, "
    "role, content, tool_calls, tool_call_id, tool_name, thinking, is_error, parts, created_at "
    "FROM copied WHERE EXISTS (TABLE s) RETURNING 1), "
    "pair AS (INSERT INTO helix.messages (session_id, seq, run_id, role, content, "
    "tool_call_id, tool_name, is_error) SELECT :new, top.top + d.ord, NULL, 'tool', "
    ":unanswered, d.id, d.name, true FROM top, d WHERE EXISTS (TABLE s) RETURNING 1), "
    "cp AS (INSERT INTO helix.checkpoints (session_id, ord, run_id, step, kind, "
    "message_seq, state, state_ord) SELECT :new, n.ord, NULL, 0, 'fork', "
    "n.last, n.state, n.ord FROM n WHERE EXISTS (TABLE s) RETURNING 1) "
    "SELECT (SELECT count(*) FROM src), (SELECT count(*) FROM s), (SELECT count(*) FROM pair)"
)

UNANSWERED = "Not answered in this branch: the session was forked while this call waited"


@dataclass(frozen=True)
class Forked:
    found: bool  # the checkpoint exists in the source session
    created: bool  # False: a session with the new id exists already
    paired: int  # tool calls paired with an "unanswered" result


async def fork_session(
    conn: SQLConnection,
    *,
    source_session_id: str,
    checkpoint_id: str,
    new_session_id: str,
    state: dict[str, Any] | None,
) -> Forked:
    """Create `new_session_id` from the checkpoint, in one statement."""
    row = (
        await conn.execute(
            _FORK,
            {
                "src": source_session_id,
                "cid": checkpoint_id,
                "new": new_session_id,
                "state": _json(state),
                "unanswered": storable_text(UNANSWERED),
            },
        )
    ).one()
    return Forked(found=bool(row[0]), created=bool(row[1]), paired=int(row[2]))


async def forked_from(conn: SQLConnection, session_id: str) -> tuple[str | None, str | None]:
    row = (
        await conn.execute(
            _sql(
                "SELECT forked_from_session_id, forked_from_checkpoint_id "
                "FROM helix.sessions WHERE session_id = :sid"
            ),
            {"sid": session_id},
        )
    ).first()
    return (row[0], row[1]) if row else (None, None)


# --- retention ------------------------------------------------------------------

# Sessions with no live run: prune never touches any other (checked again by each batch's
# statement, in its own snapshot, so a run that started since is left alone too).
QUIET = (
    f"NOT EXISTS (SELECT 1 FROM helix.runs lr WHERE lr.session_id = {{s}} AND lr.status IN {_LIVE})"
)

# Checkpoints are pruned a session at a time (migration 0030): a derived checkpoint has no
# row to delete, so prune hides the session's checkpoints up to an edge behind a `base`
# row there, which the view never lists and which holds what the checkpoints after it
# read: the state in effect at the edge and the usage of the steps up to it. The edge is
# the newest checkpoint older than the cutoff at or below the session's (K+1)-th newest
# (`keep`: the last K stay); every stored row below it goes, a row at it becomes the base,
# and a kept row whose state lived below it points at the base's.

# The sessions that may have checkpoints to prune, after `:after` (keyset order): quiet,
# with a stored checkpoint older than the cutoff, or a run started before it whose steps
# may be derived.
_PRUNABLE_SESSIONS = _sql(
    "SELECT s.session_id FROM helix.sessions s WHERE s.session_id > :after "
    f"AND {QUIET.format(s='s.session_id')} "
    "AND (EXISTS (SELECT 1 FROM helix.checkpoints c WHERE c.session_id = s.session_id "
    "AND c.kind <> 'base' AND c.created_at < :cutoff) "
    "OR EXISTS (SELECT 1 FROM helix.runs r WHERE r.session_id = s.session_id "
    "AND r.derived_after IS NOT NULL AND r.started_at < :cutoff)) "
    "ORDER BY s.session_id LIMIT :batch"
)

_STEPS_USAGE = ", ".join(f"{col} = e.steps_{col}" for col in USAGE_COLUMNS)

# One session (see above), in one statement, under its row lock taken with SKIP LOCKED
# (a run opening meanwhile is left alone, and so is its session): how many checkpoints
# are no longer listed.
_PRUNE_SESSION = _sql(
    "WITH q AS (SELECT 1 FROM helix.sessions s WHERE s.session_id = :sid "
    f"AND {QUIET.format(s='s.session_id')} FOR UPDATE OF s SKIP LOCKED), "
    "tl AS (SELECT t.* FROM helix.checkpoint_timeline_of(:sid) t), "
    "vis AS (SELECT t.ord, t.created_at FROM tl t WHERE t.listed AND EXISTS (TABLE q)), "
    "top AS (SELECT k.ord FROM vis k ORDER BY k.ord DESC OFFSET :keep LIMIT 1), "
    "e AS (SELECT t.* FROM tl t WHERE t.ord = (SELECT max(v.ord) FROM vis v, top "
    "WHERE v.ord <= top.ord AND v.created_at < :cutoff)), "
    "gone AS (DELETE FROM helix.checkpoints c USING e "
    "WHERE c.session_id = :sid AND c.ord < e.ord RETURNING 1), "
    "made AS (UPDATE helix.checkpoints c SET kind = 'base', state = e.state, "
    f"state_ord = c.ord, {_STEPS_USAGE} FROM e "
    "WHERE c.session_id = :sid AND c.ord = e.ord RETURNING 1), "
    "added AS (INSERT INTO helix.checkpoints (session_id, ord, run_id, step, kind, "
    f"message_seq, state, state_ord, {', '.join(USAGE_COLUMNS)}, created_at) "
    "SELECT :sid, e.ord, e.run_id, e.step, 'base', e.message_seq, e.state, e.ord, "
    f"{', '.join('e.steps_' + c for c in USAGE_COLUMNS)}, e.created_at FROM e "
    "WHERE NOT e.stored RETURNING 1), "
    "kept AS (UPDATE helix.checkpoints c SET state_ord = e.ord FROM e "
    "WHERE c.session_id = :sid AND c.ord > e.ord AND c.state_ord < e.ord RETURNING 1) "
    "SELECT (SELECT count(*) FROM vis, e WHERE vis.ord <= e.ord), (SELECT count(*) FROM gone), "
    "(SELECT count(*) FROM made) + (SELECT count(*) FROM added), (SELECT count(*) FROM kept)"
)

# One batch of stream chunks of ended runs that finished before the cutoff: the rows
# removed, and the events they held (a step's row holds several: migration 0028).
_PRUNE_CHUNKS = _sql(
    "WITH victim AS (SELECT ch.session_id, ch.seq FROM helix.stream_chunks ch "
    "JOIN helix.runs r ON r.run_id = ch.run_id "
    f"WHERE r.status NOT IN {_LIVE} AND r.finished_at < :cutoff "
    f"AND {QUIET.format(s='ch.session_id')} "
    "LIMIT :batch FOR UPDATE OF ch SKIP LOCKED), "
    "gone AS (DELETE FROM helix.stream_chunks ch USING victim v "
    "WHERE ch.session_id = v.session_id AND ch.seq = v.seq "
    "RETURNING 1 + COALESCE(jsonb_array_length(ch.prior_events), 0) AS events) "
    "SELECT count(*), COALESCE(sum(events), 0) FROM gone"
)


async def prunable_sessions(
    conn: SQLConnection, *, cutoff: datetime, after: str, batch: int
) -> list[str]:
    """Up to `batch` sessions after `after` whose checkpoints `prune_session` may prune."""
    params = {"cutoff": cutoff, "after": after, "batch": batch}
    return [str(r[0]) for r in await conn.execute(_PRUNABLE_SESSIONS, params)]


async def prune_session(
    conn: SQLConnection, session_id: str, *, cutoff: datetime, keep: int
) -> int:
    """Prune one session's checkpoints (see `_PRUNE_SESSION`): how many are no longer
    listed (stored rows deleted and derived ones hidden alike)."""
    params = {"sid": session_id, "cutoff": cutoff, "keep": keep}
    return int((await conn.execute(_PRUNE_SESSION, params)).one()[0])


async def prune_chunks(conn: SQLConnection, *, cutoff: datetime, batch: int) -> tuple[int, int]:
    """One batch: the rows removed (a full batch means more may be left) and their events."""
    params = {"cutoff": cutoff, "batch": batch}
    rows, events = (await conn.execute(_PRUNE_CHUNKS, params)).one()
    return int(rows), int(events)
