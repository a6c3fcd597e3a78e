"""SQL over the `helix` schema. Every write is keyed, so a replay is a no-op.

Functions take an open SQLAlchemy async connection or session, so the caller
decides the transaction: a DBOS datasource transaction, a step's own transaction
(its writes keyed or guarded, so a replayed step changes nothing), or a plain one
for API calls.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Protocol

from pydantic import TypeAdapter
from sqlalchemy import TextClause, text

from helix_dbos.api.runs import ToolCallKind as ToolCallKind
from helix_dbos.orchestration.parts import Attachment
from helix_dbos.orchestration.types import (
    MESSAGE_LIST_FIELDS,
    NO_ITEMS,
    LLMUsage,
    Message,
    ThinkingBlock,
    ToolCall,
)
from helix_dbos.store.storable import dumps, storable_text


class SQLConnection(Protocol):
    """What every function here runs its statements on: a SQLAlchemy connection or
    session (transactions), or a `driver.DriverConnection` (autocommit statements)."""

    async def execute(self, statement: Any, parameters: Any = None) -> Any: ...


# The name before `SQLConnection` (the word "executor" also names the facade and DBOS's
# executor id); kept so code written against it still imports. New code: SQLConnection.
Executor = SQLConnection


@functools.lru_cache(maxsize=512)
def _sql(statement: str) -> TextClause:
    """A parsed `text()` clause, built once per statement: parsing its bind parameters
    costs more Python time than the round trip of a short query."""
    return text(statement)


def _json(value: Any) -> str | None:
    """JSON for a `jsonb` parameter; unstorable characters become U+FFFD (see `storable`)."""
    return None if value is None else dumps(value)


@dataclass(frozen=True)
class SessionRow:
    session_id: str
    agent_name: str
    status: str
    state: dict[str, Any]
    output: Any
    error: str | None
    parent_session_id: str | None
    turn_count: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class RunRow:
    run_id: str
    session_id: str
    workflow_id: str
    agent_name: str
    turn: int
    status: str
    step_count: int
    output: Any
    error: str | None
    waiting_for: str | None
    started_at: datetime
    finished_at: datetime | None
    stop_reason: str | None = None  # "stop_when", "usage_limit": what ended it, if not the model


@dataclass(frozen=True)
class UsageRecord:
    """One `helix.usage` row before insert; `usage_id` makes a replay a no-op. A tool
    call's record names the call: its result message carries it (`_usage_carriers`)."""

    usage_id: str
    kind: str
    step: int
    llm: LLMUsage | None = None
    tool_name: str | None = None
    duration_ms: float | None = None
    success: bool = True
    cost_usd: Decimal | None = None  # an LLM call's price (helix_dbos.llm.pricing)
    tool_call_id: str | None = None


_SESSION_COLUMNS = (
    "session_id, agent_name, status, state, output, error, parent_session_id, turn_count, "
    "created_at, updated_at"
)
_RUN_COLUMNS = (
    "run_id, session_id, workflow_id, agent_name, turn, status, step_count, output, error, "
    "waiting_for, started_at, finished_at, stop_reason"
)


# --- sessions -------------------------------------------------------------


async def get_session(
    conn: SQLConnection, session_id: str, *, for_update: bool = False
) -> SessionRow | None:
    lock = " FOR UPDATE" if for_update else ""
    row = (
        await conn.execute(
            _sql(f"SELECT {_SESSION_COLUMNS} FROM helix.sessions WHERE session_id = :sid{lock}"),
            {"sid": session_id},
        )
    ).first()
    return SessionRow(*row) if row else None


async def insert_session(
    conn: SQLConnection,
    session_id: str,
    agent_name: str,
    state: dict[str, Any],
    parent_session_id: str | None = None,
    root_session_id: str | None = None,
) -> bool:
    """Create a session; False when it already exists."""
    result = await conn.execute(
        _sql(
            "INSERT INTO helix.sessions (session_id, agent_name, state, parent_session_id, "
            "root_session_id) VALUES (:sid, :agent, CAST(:state AS jsonb), :parent, :root) "
            "ON CONFLICT DO NOTHING"
        ),
        {
            "sid": session_id,
            "agent": agent_name,
            "state": _json(state),
            "parent": parent_session_id,
            "root": root_session_id,
        },
    )
    return bool(result.rowcount)


async def session_root(conn: SQLConnection, session_id: str) -> str:
    """The root of the session's tree (the session itself when it has no parent)."""
    row = await conn.execute(
        _sql(
            "SELECT COALESCE(root_session_id, session_id) FROM helix.sessions "
            "WHERE session_id = :sid"
        ),
        {"sid": session_id},
    )
    return str(row.scalar_one())


async def live_child_runs(conn: SQLConnection, session_id: str) -> list[RunRow]:
    """The live runs of the session's direct sub-agents."""
    rows = await conn.execute(
        _sql(
            f"SELECT {', '.join('r.' + c for c in _RUN_COLUMNS.split(', '))} "
            "FROM helix.runs r JOIN helix.sessions s ON s.session_id = r.session_id "
            "WHERE s.parent_session_id = :sid AND r.status IN ('running', 'waiting', 'paused') "
            "ORDER BY r.started_at"
        ),
        {"sid": session_id},
    )
    return [RunRow(*r) for r in rows]


async def update_session(conn: SQLConnection, session_id: str, **fields: Any) -> None:
    sets: list[str] = []
    params: dict[str, Any] = {"sid": session_id}
    for name, value in fields.items():
        if name in ("state", "output"):
            sets.append(f"{name} = CAST(:{name} AS jsonb)")
            params[name] = _json(value)
        else:
            sets.append(f"{name} = :{name}")
            params[name] = storable_text(value) if isinstance(value, str) else value
    sets.append("updated_at = now()")
    await conn.execute(
        _sql(f"UPDATE helix.sessions SET {', '.join(sets)} WHERE session_id = :sid"), params
    )


# --- runs -----------------------------------------------------------------


async def get_run(conn: SQLConnection, run_id: str) -> RunRow | None:
    row = (
        await conn.execute(
            _sql(f"SELECT {_RUN_COLUMNS} FROM helix.runs WHERE run_id = :rid"), {"rid": run_id}
        )
    ).first()
    return RunRow(*row) if row else None


# --- starting a run ------------------------------------------------------------------
# A process holds a session-level advisory lock on the run id from before the run's
# row exists until its workflow exists: a live row whose workflow is missing is then
# stale only if nobody holds its lock (the lock dies with the process's connection).


async def lock_run_start(conn: SQLConnection, run_id: str) -> None:
    await conn.execute(_sql("SELECT pg_advisory_lock(hashtextextended(:rid, 0))"), {"rid": run_id})


async def unlock_run_start(conn: SQLConnection, run_id: str) -> None:
    await conn.execute(
        _sql("SELECT pg_advisory_unlock(hashtextextended(:rid, 0))"), {"rid": run_id}
    )


# Behind a transaction pooler a session-level lock stays with the server connection the
# pooler lent, while the unlock may go to another: the lock would leak. There the start
# lock is a transaction-level one, held by a transaction of its own on the lock's
# connection (a pooler keeps a transaction on one server connection) and released by
# its COMMIT; the run's rows are written by other connections meanwhile.


async def lock_run_start_in_transaction(conn: SQLConnection, run_id: str) -> None:
    await conn.execute(_sql("BEGIN"))
    await conn.execute(
        _sql("SELECT pg_advisory_xact_lock(hashtextextended(:rid, 0))"), {"rid": run_id}
    )


async def end_run_start_transaction(conn: SQLConnection) -> None:
    await conn.execute(_sql("COMMIT"))


async def run_start_settled(conn: SQLConnection, run_id: str) -> bool:
    """Nobody is starting this run; the check holds until the transaction ends."""
    row = await conn.execute(
        _sql("SELECT pg_try_advisory_xact_lock(hashtextextended(:rid, 0))"), {"rid": run_id}
    )
    return bool(row.scalar())


async def get_live_run(conn: SQLConnection, session_id: str) -> RunRow | None:
    row = (
        await conn.execute(
            _sql(
                f"SELECT {_RUN_COLUMNS} FROM helix.runs "
                "WHERE session_id = :sid AND status IN ('running', 'waiting', 'paused')"
            ),
            {"sid": session_id},
        )
    ).first()
    return RunRow(*row) if row else None


async def list_runs(conn: SQLConnection, session_id: str) -> list[RunRow]:
    rows = await conn.execute(
        _sql(
            f"SELECT {_RUN_COLUMNS} FROM helix.runs WHERE session_id = :sid ORDER BY turn, started_at"
        ),
        {"sid": session_id},
    )
    return [RunRow(*r) for r in rows]


async def session_tenant(conn: SQLConnection, session_id: str) -> str | None:
    """The tenant of the session's latest run: a resume or retry runs for it too."""
    row = await conn.execute(
        _sql(
            "SELECT tenant FROM helix.runs WHERE session_id = :sid "
            "ORDER BY turn DESC, started_at DESC LIMIT 1"
        ),
        {"sid": session_id},
    )
    tenant: str | None = row.scalar()
    return tenant


async def insert_run(
    conn: SQLConnection,
    *,
    run_id: str,
    session_id: str,
    workflow_id: str,
    agent_name: str,
    turn: int,
    max_steps: int,
    options: dict[str, Any] | None = None,
) -> None:
    await conn.execute(
        _sql(
            "INSERT INTO helix.runs (run_id, session_id, workflow_id, agent_name, turn, max_steps, options, start_sequence) "
            "VALUES (:rid, :sid, :wid, :agent, :turn, :max_steps, CAST(:options AS jsonb), "
            " (SELECT chunk_seq FROM helix.sessions WHERE session_id = :sid))"
        ),
        {
            "rid": run_id,
            "sid": session_id,
            "wid": workflow_id,
            "agent": agent_name,
            "turn": turn,
            "max_steps": max_steps,
            "options": _json(options or {}),
        },
    )


# --- messages -------------------------------------------------------------


async def allocate_message_seqs(conn: SQLConnection, session_id: str, count: int) -> int:
    """Reserve `count` sequence numbers at the end of the transcript; returns the first.

    The counter lives on the session row, so allocation locks it until commit and two
    writers (an abort's closing messages and a late step commit, say) never collide. It
    never falls behind rows written by plain SQL.
    """
    first = (
        await conn.execute(
            _sql(
                "UPDATE helix.sessions SET message_seq = GREATEST(message_seq, "
                "(SELECT COALESCE(max(seq), 0) FROM helix.messages WHERE session_id = :sid)) + :n "
                "WHERE session_id = :sid RETURNING message_seq - :n + 1"
            ),
            {"sid": session_id, "n": count},
        )
    ).scalar_one()
    return int(first)


def message_record(message: Message) -> dict[str, Any]:
    """A message as the JSON-ready columns of its `helix.messages` row."""
    return {
        "role": message.role,
        "content": message.content,
        "tool_calls": [c.model_dump(mode="json") for c in message.tool_calls] or None,
        "tool_call_id": message.tool_call_id,
        "tool_name": message.tool_name,
        "thinking": [t.model_dump(mode="json") for t in message.thinking] or None,
        "is_error": message.is_error,
        "parts": [a.model_dump(mode="json") for a in message.attachments] or None,
    }


async def insert_messages(
    conn: SQLConnection,
    session_id: str,
    run_id: str | None,
    first_seq: int,
    messages: Sequence[Message],
) -> int:
    """Insert messages at first_seq, first_seq+1, ...; returns the next free seq."""
    if not messages:
        return first_seq
    rows = [{"ord": i, **message_record(m)} for i, m in enumerate(messages)]
    await conn.execute(
        _sql(
            "INSERT INTO helix.messages "
            "(session_id, seq, run_id, role, content, tool_calls, tool_call_id, tool_name, thinking, "
            "is_error, parts) "
            f"SELECT :sid, :first + m.ord, :rid, {_MESSAGE_FIELDS} FROM {_MESSAGE_RECORDSET}"
        ),
        {"sid": session_id, "first": first_seq, "rid": run_id, "rows": _json(rows)},
    )
    return first_seq + len(messages)


_MESSAGE_FIELDS = (
    "m.role, m.content, m.tool_calls, m.tool_call_id, m.tool_name, m.thinking, "
    "m.is_error IS TRUE, m.parts"
)
_MESSAGE_TYPES = (
    "ord int, role text, content text, tool_calls jsonb, tool_call_id text, tool_name text, "
    "thinking jsonb, is_error bool, parts jsonb"
)
_MESSAGE_RECORDSET = f"jsonb_to_recordset(CAST(:rows AS jsonb)) AS m({_MESSAGE_TYPES})"


_MESSAGE_VALIDATOR = Message.__pydantic_validator__
# A transcript row's JSON columns are read as text and validated from it by pydantic's
# JSON parser (`MESSAGE_COLUMNS`): psycopg's jsonb loader (`json.loads` of bytes), then a
# second pass over the dicts it made, cost three times as much (4.6 against 1.6 µs for
# one tool call: a cold read of a long session builds thousands).
_TOOL_CALLS = TypeAdapter(list[ToolCall])
_THINKING = TypeAdapter(list[ThinkingBlock])
_ATTACHMENTS = TypeAdapter(list[Attachment])
# A JSON column with nothing in it: SQL NULL, or a JSON null a row written with SQL may
# hold (the old decoding read it as None, so as the model's default).
_NO_JSON = (None, "null")
# What `_message_from_row` reads, in its order: the first columns of every statement that
# reads messages.
MESSAGE_COLUMNS = (
    "seq, role, content, tool_calls::text, tool_call_id, tool_name, thinking::text, "
    "is_error, parts::text"
)


def _message_from_row(row: Any) -> tuple[int, Message]:
    """A transcript row (its first columns `MESSAGE_COLUMNS`) as its message.

    Only the columns that differ from the model's defaults go into the validator's input:
    a long session's first read builds thousands of these, and this is two to three times
    as fast as building each nested model by hand."""
    fields: dict[str, Any] = {"role": row[1]}
    if row[2] is not None:
        fields["content"] = row[2]
    if row[3] not in _NO_JSON:
        fields["tool_calls"] = _TOOL_CALLS.validate_json(row[3])
    if row[4] is not None:
        fields["tool_call_id"] = row[4]
    if row[5] is not None:
        fields["tool_name"] = row[5]
    if row[6] not in _NO_JSON:
        fields["thinking"] = _THINKING.validate_json(row[6])
    if row[7]:
        fields["is_error"] = True
    if row[8] not in _NO_JSON:
        fields["attachments"] = _ATTACHMENTS.validate_json(row[8])
    message = _MESSAGE_VALIDATOR.validate_python(fields)
    values = message.__dict__
    for name in MESSAGE_LIST_FIELDS:  # one shared empty list, not three of its own
        if not values[name]:
            values[name] = NO_ITEMS
    return row[0], message


async def load_messages(
    conn: SQLConnection, session_id: str, *, after_seq: int = 0
) -> list[tuple[int, Message]]:
    rows = await conn.execute(
        _sql(
            f"SELECT {MESSAGE_COLUMNS} FROM helix.messages "
            "WHERE session_id = :sid AND seq > :after ORDER BY seq"
        ),
        {"sid": session_id, "after": after_seq},
    )
    return [_message_from_row(r) for r in rows]


# --- usage ----------------------------------------------------------------


def usage_record(record: UsageRecord, agent_name: str) -> dict[str, Any]:
    """A usage record as the JSON-ready columns of its `helix.usage` row."""
    llm = record.llm or LLMUsage()
    return {
        "usage_id": record.usage_id,
        "agent_name": agent_name,
        "step": record.step,
        "kind": record.kind,
        "model": llm.model if record.llm else None,
        "input_tokens": llm.input_tokens,
        "output_tokens": llm.output_tokens,
        "cache_read_tokens": llm.cache_read_tokens,
        "cache_write_tokens": llm.cache_write_tokens,
        "reasoning_tokens": llm.reasoning_tokens,
        "tool_name": record.tool_name,
        "duration_ms": record.duration_ms,
        "success": record.success,
        "cost_usd": str(record.cost_usd) if record.cost_usd is not None else None,
    }


# A usage record's columns as `usage_record` gives them, and their SQL types: one list for
# the step's usage rows and for the message columns that carry usage (migration 0027).
_USAGE_TYPES = (
    ("usage_id", "text"),
    ("agent_name", "text"),
    ("step", "int"),
    ("kind", "text"),
    ("model", "text"),
    ("input_tokens", "int"),
    ("output_tokens", "int"),
    ("cache_read_tokens", "int"),
    ("cache_write_tokens", "int"),
    ("reasoning_tokens", "int"),
    ("tool_name", "text"),
    ("duration_ms", "double precision"),
    ("success", "boolean"),
    ("cost_usd", "numeric"),
)
# `ord`: the step's message that carries the record (see `_step_params`), NULL for none.
_USAGE_RECORDSET = (
    "jsonb_to_recordset(CAST(:usage AS jsonb)) AS x("
    + ", ".join(f"{name} {kind}" for name, kind in _USAGE_TYPES)
    + ", ord int)"
)
_USAGE_COLUMNS = ", ".join(f"x.{name}" for name, _ in _USAGE_TYPES)


# A session and every session below it (its sub-agents, theirs, ...).
_SESSION_TREE = (
    "WITH RECURSIVE tree AS (SELECT CAST(:sid AS text) AS session_id UNION "
    "SELECT s.session_id FROM helix.sessions s JOIN tree t ON s.parent_session_id = t.session_id) "
)


async def usage_summary(
    conn: SQLConnection,
    *,
    session_id: str | None = None,
    run_id: str | None = None,
    include_children: bool = False,
) -> dict[str, int]:
    """Call counts and tokens. A `subagent` row repeats its child's tokens, so tokens
    count only the rows of the work itself: a session's own, or with
    `include_children` those of every session below it too."""
    where: list[str] = []
    params: dict[str, str] = {}
    prefix = ""
    if session_id and include_children:
        prefix = _SESSION_TREE
        where.append("session_id IN (SELECT session_id FROM tree)")
        params["sid"] = session_id
    elif session_id:
        where.append("session_id = :sid")
        params["sid"] = session_id
    if run_id:
        where.append("run_id = :rid")
        params["rid"] = run_id
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    row = (
        await conn.execute(_sql(f"{prefix}SELECT {USAGE_SELECT} FROM helix.usage {clause}"), params)
    ).one()
    return {k: int(v) for k, v in zip(USAGE_KEYS, row, strict=True)}


_TOKENS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)
# The columns of a usage summary over `helix.usage` rows, and their keys.
USAGE_SELECT = (
    "count(*) FILTER (WHERE kind = 'llm'), count(*) FILTER (WHERE kind = 'tool'), "
    + ", ".join(f"COALESCE(sum({c}) FILTER (WHERE kind <> 'subagent'), 0)" for c in _TOKENS)
    + ", count(*) FILTER (WHERE kind = 'subagent')"
)
USAGE_KEYS = ("llm_calls", "tool_calls", *_TOKENS, "subagent_calls")


async def run_usage_total(conn: SQLConnection, run_id: str) -> tuple[LLMUsage, float]:
    """A finished run's tokens, its sub-agents' included (their `subagent` rows), and
    its duration in milliseconds: what its parent's `subagent` usage row records."""
    row = (
        await conn.execute(
            _sql(
                "SELECT "
                + ", ".join(f"COALESCE(sum(u.{c}), 0)" for c in _TOKENS)
                + ", (SELECT EXTRACT(EPOCH FROM COALESCE(r.finished_at, now()) - r.started_at) "
                "* 1000 FROM helix.runs r WHERE r.run_id = :rid) "
                "FROM helix.usage u WHERE u.run_id = :rid AND u.kind IN ('llm', 'subagent')"
            ),
            {"rid": run_id},
        )
    ).one()
    tokens = LLMUsage(**{c: int(v) for c, v in zip(_TOKENS, row[:5], strict=True)})
    return tokens, float(row[5] or 0.0)


# --- stream chunks (custom events) -----------------------------------------


_NOTIFY_CHUNKS = "pg_notify('helix_chunks', :sid)"


async def insert_chunks(
    conn: SQLConnection,
    session_id: str,
    run_id: str | None,
    agent_name: str | None,
    step: int | None,
    chunks: Sequence[tuple[str, str, Any]],
    *,
    owner: Owner | None = None,
    notify: bool = True,
) -> None:
    """Insert (chunk_key, type, payload) rows at the session's next sequence numbers.

    The counter lives on the session row, so allocation locks it until commit and
    chunks of a session commit in sequence order; NOTIFY wakes live readers then
    (`notify` False: the caller wakes them after its commit, `WakeUps`).
    One statement for the whole batch. Its commit waits for the WAL flush, live chunks'
    too: a chunk is visible the moment it commits, so one a crash could lose would
    have its seq handed to another chunk, which a reader resuming after that seq never
    sees (issue 46). With `owner`, an execution that lost the run's workflow writes
    nothing (`OWNED`).
    """
    if not chunks:
        return
    await conn.execute(
        _sql(
            "WITH s AS (UPDATE helix.sessions SET chunk_seq = chunk_seq + :nchunk "
            "WHERE session_id = :sid RETURNING chunk_seq - :nchunk AS chunk_base), "
            f"ins AS ({_INSERT_CHUNKS} RETURNING 1) "
            f"SELECT {_NOTIFY_CHUNKS if notify else 'NULL'}, {OWNED}"
        ),
        {
            **owner_params(owner),
            "sid": session_id,
            "nchunk": len(chunks),
            "chunks": _chunk_records(chunks),
            "rid": run_id,
            "agent": agent_name,
            "step": step,
        },
    )


def _chunk_records(chunks: Sequence[tuple[str, str, Any]], *, grouped: int = 0) -> str | None:
    """(key, type, payload) chunks as the JSON rows `_INSERT_CHUNKS` reads, numbered from 1;
    the first `grouped` (a step's) with the `grp` of the row they go in (`_step_groups`)."""
    groups = _step_groups([kind for _, kind, _ in chunks[:grouped]])
    return _json(
        [
            {"ord": i + 1, "key": key, "type": kind, "payload": payload}
            | ({"grp": groups[i]} if i < grouped and groups[i] is not None else {})
            for i, (key, kind, payload) in enumerate(chunks)
        ]
    )


def _step_groups(kinds: Sequence[str]) -> list[int | None]:
    """Which row each of a step's events goes in (migration 0028): all in one, but a run's
    lifecycle event (`run_interrupted`, `run_stopped`), a row of its own (None) so that
    every reader, an older build's too, sees where the run ends, with the events on each
    side of it a row each: rows never interleave their seqs."""
    groups: list[int | None] = []
    current = 0
    for kind in kinds:
        if kind.startswith("run_"):
            groups.append(None)
            current += 1
        else:
            groups.append(current)
    return groups


# Inserts :chunks after `s.chunk_base`, the session's chunk counter before this batch.
_INSERT_CHUNKS = (
    "INSERT INTO helix.stream_chunks "
    "(session_id, seq, chunk_key, run_id, agent_name, step, type, payload) "
    "SELECT :sid, s.chunk_base + c.ord, c.key, :rid, :agent, :step, c.type, "
    "COALESCE(c.payload, '{}'::jsonb) FROM s, jsonb_to_recordset(CAST(:chunks AS jsonb)) "
    "AS c(ord int, key text, type text, payload jsonb) ON CONFLICT (chunk_key) DO NOTHING"
)
# A step's events, once a `claim` row with `rest` says this write is the step's first (see
# `_STEP_ROWS`), without any of a row (`grp`) already written (a `tool_start` shown live):
# the unique key that skipped it when each event was a row cannot see inside a row.
_STEP_EVENTS = (
    "ev AS (SELECT c.ord, c.key, c.type, COALESCE(c.payload, '{}'::jsonb) AS payload, c.grp "
    "FROM claim, jsonb_to_recordset(CAST(:chunks AS jsonb)) "
    "AS c(ord int, key text, type text, payload jsonb, grp int) WHERE claim.rest AND NOT "
    "(c.grp IS NOT NULL AND EXISTS (SELECT 1 FROM helix.stream_chunks x "
    "WHERE x.chunk_key = c.key))), "
)
# The step's events as rows (migration 0028): one per `grp`, its last event's seq, key,
# type and payload, and the events before it in `prior_events`, each at its own seq; an
# event without a `grp`, a row of its own.
_INSERT_STEP_CHUNKS = (
    "INSERT INTO helix.stream_chunks "
    "(session_id, seq, chunk_key, run_id, agent_name, step, type, payload, prior_events) "
    "SELECT :sid, s.chunk_base + e.ord, e.key, :rid, :agent, :step, e.type, e.payload, "
    "(SELECT jsonb_agg(jsonb_build_object('seq', s.chunk_base + g.ord, 'key', g.key, "
    "'type', g.type, 'payload', g.payload) ORDER BY g.ord) FROM ev g "
    "WHERE g.grp = e.grp AND g.ord < e.ord) FROM s, ev e "
    "WHERE e.grp IS NULL OR e.ord = (SELECT max(ord) FROM ev h WHERE h.grp = e.grp) "
    "ON CONFLICT (chunk_key) DO NOTHING"
)


async def notify_run_end(conn: SQLConnection, run_id: str) -> None:
    """Wake the callers waiting for this run's result, when the transaction commits."""
    await conn.execute(_sql("SELECT pg_notify('helix_run_end', :rid)"), {"rid": run_id})


# A row's events (migration 0028): those of its `prior_events`, then its own. The view
# `helix.stream_events` unfolds rows the same way, but a filter on its (event) seq cannot
# use the `(session_id, seq)` index: `load_chunks` limits rows first, then unfolds them.
_ROW_EVENTS = (
    "CROSS JOIN LATERAL (SELECT CAST(x ->> 'seq' AS bigint) AS seq, x ->> 'type' AS type, "
    "x -> 'payload' AS payload FROM jsonb_array_elements(c.prior_events) AS x "
    "UNION ALL SELECT c.seq, c.type, c.payload) e"
)


async def load_chunks(
    conn: SQLConnection,
    session_id: str,
    *,
    after_seq: int = 0,
    run_id: str | None = None,
    limit: int = 500,
) -> list[tuple[Any, ...]]:
    """A session's chunks after `after_seq`: its own and, for a root session, copies of its
    sub-agents' chunks (named by their own session); a run's own and its sub-agents'.

    One chunk per event: a step's row (its seq is its last event's) is unfolded, and its
    events up to `after_seq` left out. `limit` rows hold at least `limit` events after
    `after_seq`, and rows never interleave their seqs, so the first `limit` are these."""
    run_filter = " AND (run_id = :rid OR via_run_id = :rid)" if run_id else ""
    rows = await conn.execute(
        _sql(
            "SELECT e.seq, COALESCE(c.source_session_id, c.session_id), c.run_id, "
            "c.agent_name, c.step, e.type, e.payload, c.created_at, c.via_run_id FROM "
            "(SELECT * FROM helix.stream_chunks "
            f"WHERE session_id = :sid AND seq > :after{run_filter} ORDER BY seq LIMIT :limit) c "
            f"{_ROW_EVENTS} WHERE e.seq > :after ORDER BY e.seq LIMIT :limit"
        ),
        {"sid": session_id, "after": after_seq, "rid": run_id, "limit": limit},
    )
    return [tuple(r) for r in rows]


async def append_messages(
    conn: SQLConnection, session_id: str, run_id: str | None, messages: Sequence[Message]
) -> int:
    """Append at the end of the transcript, at sequence numbers allocated now.

    Allocating at commit time (not when the step started) lets an abort's closing
    messages and a late commit of the aborted step both land, in order.
    """
    if not messages:
        return 0
    first_seq = await allocate_message_seqs(conn, session_id, len(messages))
    return await insert_messages(conn, session_id, run_id, first_seq, messages)


_LIVE_STATUSES = "('running', 'waiting', 'paused')"


# A step's usage rows that no written message carries, once a `claim` row says this
# write is the step's first: records no message carries, and those whose message is not
# written because the run ended after the step's head (`rest` false). A record on a head
# written before (`with_head` false) is skipped: the head carried it (migration 0027).
INSERT_STEP_USAGE = (
    "INSERT INTO helix.usage_rows (session_id, run_id, usage_id, agent_name, step, kind, "
    "model, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, "
    "reasoning_tokens, tool_name, duration_ms, success, cost_usd) SELECT :sid, :rid, "
    f"{_USAGE_COLUMNS} FROM claim, {_USAGE_RECORDSET} WHERE x.ord IS NULL "
    "OR ((x.ord >= :nhead OR claim.with_head) AND NOT claim.rest) "
    "ON CONFLICT (usage_id) DO NOTHING"
)
# A step's messages: `_MESSAGE_RECORDSET` with the usage a message carries, in the usage
# columns `helix.messages` has as a child of `helix.usage_rows` (migration 0027); its
# session, run, step, tool_name and created_at are the message's own.
_CARRIED_TYPES = tuple((n, t) for n, t in _USAGE_TYPES if n not in ("step", "tool_name"))
_CARRIED = tuple(name for name, _ in _CARRIED_TYPES)
_STEP_MESSAGE_RECORDSET = (
    f"jsonb_to_recordset(CAST(:rows AS jsonb)) AS m({_MESSAGE_TYPES}, "
    + ", ".join(f"{name} {kind}" for name, kind in _CARRIED_TYPES)
    + ")"
)


# The rows of one step after `s` (the session's counters) and a `claim` with `with_head`
# and `rest`: a head already written (`runs.committed_head`) is skipped, and the rest
# renumbered. Without `rest` (the run ended after its head was written: whatever ended
# it paired the head's calls) only the usage lands, so no call gets a second result.
_STEP_ROWS = (
    "msg AS (INSERT INTO helix.messages "
    "(session_id, seq, run_id, role, content, tool_calls, tool_call_id, tool_name, "
    f"thinking, is_error, parts, step, {', '.join(_CARRIED)}) SELECT :sid, s.first_msg + m.ord - "
    "CASE WHEN claim.with_head THEN 0 ELSE :nhead END, :rid, "
    f"{_MESSAGE_FIELDS}, :step, {', '.join('m.' + c for c in _CARRIED)} "
    f"FROM s, claim, {_STEP_MESSAGE_RECORDSET} "
    "WHERE (m.ord >= :nhead OR claim.with_head) AND claim.rest RETURNING 1), "
    f"u AS ({INSERT_STEP_USAGE} RETURNING 1), "
    f"{_STEP_EVENTS}c AS ({_INSERT_STEP_CHUNKS} RETURNING 1) "
)
# The session's counters, moved past the rows a claimed write inserts.
_STEP_COUNTERS = (
    "s AS (UPDATE helix.sessions SET "
    "message_seq = GREATEST(message_seq, (SELECT COALESCE(max(seq), 0) "
    "FROM helix.messages WHERE session_id = :sid)) + (SELECT n FROM nmsg), "
    "chunk_seq = chunk_seq + :nchunk, "
    "state = COALESCE(CAST(:state AS jsonb), state), updated_at = now() "
    "WHERE session_id = :sid AND EXISTS (SELECT 1 FROM claim) "
    "RETURNING message_seq - (SELECT n FROM nmsg) + 1 AS first_msg, "
    "chunk_seq - :nchunk AS chunk_base, state), "
)


# Whether the step's checkpoint is left to be derived (migration 0030): `unstored_step`
# names the step, and the checkpoint trigger stores no row for it, when the step writes
# no state, is not its run's first write (`prior.committed_head` 0: the first checkpoint
# of a run holds the state it started with), writes at least one message (its last
# message's seq is then its checkpoint's `message_seq`), and its run derives. Evaluated
# in the claim's UPDATE, before its new values: `prior` is the row as it was.
_UNSTORED_STEP = (
    "unstored_step = CASE WHEN CAST(:state AS jsonb) IS NULL AND derived_after IS NOT NULL "
    "AND (SELECT committed_head > 0 AND CASE WHEN NOT (live OR committed_head < :step) "
    "THEN 0 WHEN committed_head < :step THEN :nmsg ELSE :nmsg - :nhead END > 0 FROM prior) "
    "THEN :step ELSE unstored_step END"
)


# The writing execution still owns the run's workflow (see migration 0012), evaluated in
# the statement's select list, so it runs even when the keyed write finds nothing to do,
# and raises (SQLSTATE `OWNER_LOST`), rolling the whole statement back, when it does not.
OWNER_LOST = "HX001"
OWNED = "helix.owns(:ow, :ox)"
# A workflow execution's id and DBOS ownership token; None outside a workflow.
Owner = tuple[str, str]


def owner_params(owner: Owner | None) -> dict[str, str | None]:
    return {"ow": owner[0], "ox": owner[1]} if owner else {"ow": None, "ox": None}


# Which of a step's messages carries which usage record (migration 0027): the LLM call's
# on the step's assistant message, each tool call's on the call's result, so the step
# writes no `helix.usage` row of its own for them. The choice depends only on the step's
# rows, so the head write and the step write (and a replay of either) agree on it: the
# step write skips the head's message, and its usage with it, when the head went first.
def _usage_carriers(
    messages: Sequence[Message], usage: Sequence[UsageRecord], step: int
) -> list[int | None]:
    """For each usage record, the index of the message that carries it (None: it gets a
    row of its own). The `llm` record goes on the step's first message when that is the
    model's (the head); a tool call's record on the result of that call. A message
    carries one record at most, only of the step being written, and only one whose
    tool_name is its own: the message's column is the usage's (migration 0027)."""
    taken: set[int] = set()
    result_of = {
        m.tool_call_id: i
        for i, m in reversed(list(enumerate(messages)))
        if m.role == "tool" and m.tool_call_id is not None
    }
    head = 0 if messages and messages[0].role == "assistant" else None

    def candidate(record: UsageRecord) -> int | None:
        if record.step != step:
            return None
        if record.tool_call_id is not None:
            return result_of.get(record.tool_call_id)
        return head if record.kind == "llm" else None

    carriers: list[int | None] = []
    for record in usage:
        index = candidate(record)
        if index is not None and (index in taken or messages[index].tool_name != record.tool_name):
            index = None
        if index is not None:
            taken.add(index)
        carriers.append(index)
    return carriers


def _step_params(
    session_id: str,
    run_id: str,
    agent_name: str,
    step: int,
    messages: Sequence[Message],
    usage: Sequence[UsageRecord],
    chunks: Sequence[tuple[str, str, Any]],
    state: dict[str, Any] | None,
    head_messages: int,
) -> dict[str, Any]:
    message_rows = [{"ord": i, **message_record(m)} for i, m in enumerate(messages)]
    usage_rows = [usage_record(r, agent_name) for r in usage]
    for row, ord_ in zip(usage_rows, _usage_carriers(messages, usage, step), strict=True):
        if ord_ is not None:  # its message carries it
            message_rows[ord_].update({c: row[c] for c in _CARRIED})
            row["ord"] = ord_
    return {
        "sid": session_id,
        "rid": run_id,
        "agent": agent_name,
        "step": step,
        "state": _json(state),
        "nmsg": len(message_rows),
        "nhead": head_messages,
        "rows": _json(message_rows),
        "usage": _json(usage_rows),
        "nchunk": len(chunks),
        "chunks": _chunk_records(chunks, grouped=len(chunks)),
    }


async def commit_step_rows(
    conn: SQLConnection,
    *,
    session_id: str,
    run_id: str,
    agent_name: str,
    step: int,
    messages: Sequence[Message],
    state: dict[str, Any] | None,
    usage: Sequence[UsageRecord],
    chunks: Sequence[tuple[str, str, Any]],
    head_messages: int = 0,
    workflow_id: str | None = None,
    owner: Owner | None = None,
) -> StepWrite:
    """Write one agent step's messages, state, usage and chunks, once: one statement.

    `runs.committed_step` is the step's idempotency key: the first writer moves it to
    `step` and writes the rows; a replay (a recovered or retried step) finds it there
    and writes nothing. The first `head_messages` messages are the step's head, skipped
    when `commit_step_head` wrote them already (usage and chunks are keyed by
    themselves). With `workflow_id`, the same round trip also answers
    whether an interrupt is pending and the state, for the LLM step that writes. Its
    commit waits for the WAL flush: its chunks are visible once it commits, and a seq a
    reader saw must never be handed out again (see `insert_chunks`). It sends no
    NOTIFY: the caller wakes the session's readers after it (`WakeUps`).
    """
    params = _step_params(
        session_id, run_id, agent_name, step, messages, usage, chunks, state, head_messages
    )
    params["wid"] = workflow_id
    params.update(owner_params(owner))
    row = (
        await conn.execute(
            _sql(
                # `prior` locks the run's row and reads its head key before the UPDATE
                # (an initplan of its WHERE): the UPDATE's RETURNING sees only new values.
                # `prior` also reads whether the run is live once the lock is ours (an
                # abort that committed meanwhile shows), for `rest` (see `_STEP_ROWS`).
                "WITH prior AS (SELECT committed_head, status IN "
                f"{_LIVE_STATUSES} AS live FROM helix.runs WHERE run_id = :rid "
                "FOR UPDATE), "
                "claim AS (UPDATE helix.runs SET committed_step = :step, "
                "committed_head = GREATEST(committed_head, :step), step_count = "
                "CASE WHEN status IN ('running', 'waiting', 'paused') THEN :step ELSE step_count END, "
                f"{_UNSTORED_STEP} "
                "WHERE run_id = :rid AND committed_step < :step AND EXISTS (SELECT 1 FROM prior) "
                "RETURNING (SELECT committed_head FROM prior) < :step AS with_head, "
                "(SELECT live OR committed_head < :step FROM prior) AS rest), "
                "nmsg AS (SELECT CASE WHEN NOT claim.rest THEN 0 "
                "WHEN claim.with_head THEN :nmsg ELSE :nmsg - :nhead END AS n FROM claim), "
                f"{_STEP_COUNTERS}{_STEP_ROWS}"
                "SELECT count(*) > 0, (SELECT first_msg FROM s), "
                "COALESCE((SELECT state FROM s), "
                "(SELECT state FROM helix.sessions WHERE session_id = :sid)), "
                f"{_INTERRUPT_PENDING}, "
                "bool_or(claim.with_head), "
                "(SELECT status FROM helix.runs WHERE run_id = :rid) NOT IN "
                f"('running', 'waiting', 'paused'), {OWNED}, {STEER_PENDING}"
                " FROM claim"
            ),
            params,
        )
    ).one()
    wrote = bool(row[0])
    return StepWrite(
        first_seq=int(row[1]) if wrote else None,
        state=dict(row[2] or {}),
        interrupted=bool(row[3]),
        with_head=bool(row[4]) if wrote else False,
        run_ended=bool(row[5]),
        steer_pending=bool(row[7]),
    )


async def commit_step_head(
    conn: SQLConnection,
    *,
    session_id: str,
    run_id: str,
    agent_name: str,
    step: int,
    messages: Sequence[Message],
    usage: Sequence[UsageRecord],
    owner: Owner | None = None,
) -> bool:
    """Write a step's head (the model's message, its LLM usage) before the rest of the
    step, once (`runs.committed_head` is its key); False when it was already written, or
    the run has ended: an abort pairs the calls it finds, so a head landing after it
    would leave its calls without a result."""
    params = _step_params(session_id, run_id, agent_name, step, messages, usage, [], None, 0)
    params.update(owner_params(owner))
    row = (
        await conn.execute(
            _sql(
                "WITH claim AS (UPDATE helix.runs SET committed_head = :step, step_count = "
                "CASE WHEN status IN ('running', 'waiting', 'paused') THEN :step ELSE step_count END "
                "WHERE run_id = :rid AND committed_head < :step AND committed_step < :step "
                f"AND status IN {_LIVE_STATUSES} "
                "RETURNING true AS with_head, true AS rest), "
                "nmsg AS (SELECT :nmsg AS n), "
                f"{_STEP_COUNTERS}{_STEP_ROWS}"
                f"SELECT count(*) > 0, {OWNED} FROM claim"
            ),
            params,
        )
    ).one()
    return bool(row[0])


@dataclass(frozen=True)
class StepWrite:
    """What writing a step's rows found: where its messages start (`None` when a
    replay found them written), the session's state, a pending soft interrupt."""

    first_seq: int | None
    state: dict[str, Any]
    interrupted: bool
    with_head: bool = True  # False: the step's head had been written before these rows
    run_ended: bool = False  # the run has a final status already (see `FirstRead`)
    steer_pending: bool = False  # a steer message waits for the next model input


# A steer message (double texting) waits for the session's live run: an index probe.
STEER_PENDING = (
    "EXISTS (SELECT 1 FROM helix.queued_messages WHERE session_id = :sid "
    "AND status = 'queued' AND strategy = 'steer')"
)
# A `helix.interrupt` message sent to the run's workflow and not yet received.
_INTERRUPT_PENDING = "EXISTS (SELECT 1 FROM helix.unreceived_interrupts(:wid))"
# Rolled-back runs of the session (migration 0033's partial index: one entry a rollback).
_ROLLBACKS = (
    "(SELECT count(*) FROM helix.runs WHERE session_id = :sid AND rolled_back_at IS NOT NULL)"
)


async def interrupt_pending(conn: SQLConnection, workflow_id: str) -> bool:
    row = await conn.execute(_sql(f"SELECT {_INTERRUPT_PENDING}"), {"wid": workflow_id})
    return bool(row.scalar())


@dataclass(frozen=True)
class FirstRead:
    """What a run's first LLM step reads: whether its run exists and has ended, a
    pending interrupt, the session's state, and the transcript after a sequence number.

    A run that has ended already is one whose final write committed before its
    workflow's last checkpoint (a crash in between, see `StepAhead`), or one
    aborted meanwhile: its next LLM step must not ask the model anything."""

    run_exists: bool
    run_ended: bool
    interrupted: bool
    state: dict[str, Any]
    messages: list[tuple[int, Message]]
    steer_pending: bool = False  # a steer message waits for the next model input
    # How many of the session's runs were ever rolled back (`rollback.py`): a transcript
    # cached while there were fewer may hold messages a rollback has removed since.
    rollbacks: int = 0


_SEQ = operator.itemgetter(0)


async def first_read(
    conn: SQLConnection, workflow_id: str | None, session_id: str, run_id: str, *, after_seq: int
) -> FirstRead:
    """`FirstRead` in one round trip: a header row at seq 0, which no message has (its
    values after the message columns), then the messages after `after_seq`."""
    rows = (
        await conn.execute(
            _sql(
                "SELECT 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
                f"{_INTERRUPT_PENDING}, "
                "(SELECT state FROM helix.sessions WHERE session_id = :sid), "
                f"(SELECT status FROM helix.runs WHERE run_id = :rid), {STEER_PENDING}, "
                f"{_ROLLBACKS} "
                f"UNION ALL SELECT {MESSAGE_COLUMNS}, NULL, NULL, NULL, NULL, NULL "
                "FROM helix.messages WHERE session_id = :sid AND seq > :after"
            ),
            {"wid": workflow_id, "sid": session_id, "rid": run_id, "after": after_seq},
        )
    ).all()
    # Ordered here, not by the server: the rows come (nearly) in order already, which
    # Python's sort takes in one pass, where the server sorted every row (0.7 ms at
    # 1,000 messages). The header's seq is 0, below every message's.
    rows.sort(key=_SEQ)
    header, messages = rows[0], rows[1:]
    return FirstRead(
        run_exists=header[11] is not None,
        run_ended=header[11] is not None and header[11] not in ("running", "waiting", "paused"),
        interrupted=bool(header[9]),
        state=dict(header[10] or {}),
        messages=[_message_from_row(r) for r in messages],
        steer_pending=bool(header[12]),
        rollbacks=int(header[13]),
    )


async def update_live_run(conn: SQLConnection, run_id: str, **fields: Any) -> bool:
    """Update a run only while it is live; False when it already ended (aborted, say)."""
    sets: list[str] = []
    params: dict[str, Any] = {"rid": run_id}
    for name, value in fields.items():
        if name == "output":
            sets.append("output = CAST(:output AS json)")  # keeps key order
            params[name] = _json(value)
        elif name == "finished":
            if value:
                sets.append("finished_at = now()")
        elif name == "waiting_since_now":
            if value:
                sets.append("waiting_since = now()")
        else:
            sets.append(f"{name} = :{name}")
            params[name] = storable_text(value) if isinstance(value, str) else value
    result = await conn.execute(
        _sql(
            f"UPDATE helix.runs SET {', '.join(sets)} WHERE run_id = :rid AND status IN ('running', 'waiting', 'paused')"
        ),
        params,
    )
    return bool(result.rowcount)


# --- pending tool calls (approvals, client tools, human input) ---------------


@dataclass(frozen=True)
class PendingToolCall:
    tool_call_id: str
    tool_name: str
    kind: ToolCallKind
    input: Any
    timeout_seconds: float


@dataclass(frozen=True)
class ToolCallRow:
    session_id: str
    tool_call_id: str
    run_id: str
    workflow_id: str
    tool_name: str
    kind: str
    status: str
    input: Any
    answered_at: datetime | None
    deadline_at: datetime | None
    created_at: datetime


_TOOL_CALL_COLUMNS = "session_id, tool_call_id, run_id, workflow_id, tool_name, kind, status, input, answered_at, deadline_at, created_at"


class DuplicateToolCallIdError(RuntimeError):
    """Two different calls of one run under one id: refused, never asked about."""

    def __init__(self, run_id: str, tool_call_id: str) -> None:
        super().__init__(
            f"Run {run_id} has two different tool calls with the id {tool_call_id!r}; "
            "helix asks no human about either"
        )


async def insert_pending_tool_calls(
    conn: SQLConnection,
    session_id: str,
    run_id: str,
    workflow_id: str,
    calls: Sequence[PendingToolCall],
) -> dict[str, float]:
    """Record pending calls with their deadlines; returns deadline epochs from the database
    clock. Each id is one call: the row holds exactly the arguments that run if approved."""
    deadlines: dict[str, float] = {}
    for call in calls:
        row = (
            await conn.execute(
                _sql(
                    "INSERT INTO helix.tool_calls (session_id, tool_call_id, run_id, workflow_id, tool_name, kind, input, deadline_at) "
                    "VALUES (:sid, :tcid, :rid, :wid, :name, :kind, CAST(:input AS jsonb), now() + make_interval(secs => :timeout)) "
                    # A retried insert finds its own row; a different call under a taken
                    # id updates nothing, returns no row and is refused below.
                    "ON CONFLICT (run_id, tool_call_id) DO UPDATE SET tool_name = EXCLUDED.tool_name "
                    "WHERE helix.tool_calls.tool_name = EXCLUDED.tool_name "
                    "AND helix.tool_calls.kind = EXCLUDED.kind "
                    "AND helix.tool_calls.input IS NOT DISTINCT FROM EXCLUDED.input "
                    "RETURNING extract(epoch FROM deadline_at)"
                ),
                {
                    "sid": session_id,
                    "tcid": call.tool_call_id,
                    "rid": run_id,
                    "wid": workflow_id,
                    "name": call.tool_name,
                    "kind": call.kind,
                    "input": _json(call.input),
                    "timeout": call.timeout_seconds,
                },
            )
        ).scalar_one_or_none()
        if row is None or call.tool_call_id in deadlines:
            # One answer per id: two calls under one id would run on one approval.
            raise DuplicateToolCallIdError(run_id, call.tool_call_id)
        deadlines[call.tool_call_id] = float(row)
    return deadlines


async def mark_answered(conn: SQLConnection, run_id: str, tool_call_id: str) -> None:
    await conn.execute(
        _sql(
            "UPDATE helix.tool_calls SET answered_at = now() WHERE run_id = :rid AND tool_call_id = :tcid"
        ),
        {"rid": run_id, "tcid": tool_call_id},
    )


async def pending_tool_calls(conn: SQLConnection, session_id: str) -> list[ToolCallRow]:
    rows = await conn.execute(
        _sql(
            f"SELECT {_TOOL_CALL_COLUMNS} FROM helix.tool_calls WHERE session_id = :sid AND status = 'pending' ORDER BY created_at"
        ),
        {"sid": session_id},
    )
    return [ToolCallRow(*r) for r in rows]


async def pending_kinds(conn: SQLConnection, run_id: str) -> list[ToolCallKind]:
    """What a run's pending calls wait for (approval, client, human_input)."""
    rows = await conn.execute(
        _sql(
            "SELECT DISTINCT kind FROM helix.tool_calls WHERE run_id = :rid AND status = 'pending' "
            "ORDER BY kind"
        ),
        {"rid": run_id},
    )
    kinds: list[ToolCallKind] = []
    for (kind,) in rows:
        if kind in ("approval", "client", "human_input"):
            kinds.append(kind)
    return kinds


async def abort_pending_tool_calls(conn: SQLConnection, run_id: str, reason: str) -> None:
    await conn.execute(
        _sql(
            "UPDATE helix.tool_calls SET status = 'aborted', reason = :reason, resolved_at = now() "
            "WHERE run_id = :rid AND status = 'pending'"
        ),
        {"rid": run_id, "reason": reason},
    )


async def message_seqs_of_run(conn: SQLConnection, run_id: str) -> set[int]:
    rows = await conn.execute(
        _sql("SELECT seq FROM helix.messages WHERE run_id = :rid"), {"rid": run_id}
    )
    return {r[0] for r in rows}


async def unpaired_finish_call_ids(conn: SQLConnection, session_id: str) -> list[str]:
    """`__finish__` calls with no tool result (left by older code as a run's last
    message), found in SQL. Only the last assistant message can hold one: every turn
    opened since heals it.

    The last assistant message is found by walking back from the session's last message
    one row at a time (`ORDER BY seq DESC LIMIT 1`, a backward step of the primary key,
    whatever the statistics say): filtered on `role` instead, a session written since
    the last ANALYZE was planned as a scan of its whole transcript and a sort (0.5 ms
    at 1,000 messages)."""
    rows = await conn.execute(_UNPAIRED_FINISH, {"sid": session_id})
    return [r[0] for r in rows]


_UNPAIRED_FINISH = _sql(
    "WITH RECURSIVE back AS ("
    "(SELECT seq, role, tool_calls FROM helix.messages WHERE session_id = :sid "
    "ORDER BY seq DESC LIMIT 1) "
    "UNION ALL "
    "SELECT p.seq, p.role, p.tool_calls FROM back b CROSS JOIN LATERAL "
    "(SELECT seq, role, tool_calls FROM helix.messages WHERE session_id = :sid "
    "AND seq < b.seq ORDER BY seq DESC LIMIT 1) p WHERE b.role <> 'assistant') "
    "SELECT c->>'id' FROM back m, jsonb_array_elements(m.tool_calls) c "
    "WHERE m.role = 'assistant' AND c->>'name' = '__finish__' "
    "AND NOT EXISTS (SELECT 1 FROM helix.messages t WHERE t.session_id = :sid "
    "AND t.seq > m.seq AND t.role = 'tool' AND t.tool_call_id = c->>'id')"
)


async def run_waits(
    conn: SQLConnection, run_id: str
) -> list[tuple[str, str, str, str, datetime, datetime | None]]:
    """The calls a run waited on for a human or a client: id, tool, kind, status, when
    the wait began and when it was resolved (a trace's suspend and resume events)."""
    rows = await conn.execute(
        _sql(
            "SELECT tool_call_id, tool_name, kind, status, created_at, resolved_at "
            "FROM helix.tool_calls WHERE run_id = :rid ORDER BY created_at, tool_call_id"
        ),
        {"rid": run_id},
    )
    return [(r[0], r[1], r[2], r[3], r[4], r[5]) for r in rows]
