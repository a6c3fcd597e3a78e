"""SQL of `helix.summaries` (migration 0023): context compaction's summaries, written
once per (session, last covered message) and read by every later LLM step.

No owner check on the insert: the row is keyed and never updated, so whichever execution
of the step inserts first wins, and every reader (the step that lost, a replay, the next
LLM step) reads that one row."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from helix_dbos.store.repository import Executor, _sql


@dataclass(frozen=True)
class SummaryRow:
    """A summary that stands for the session's first `covers_messages` messages (those up
    to `covers_through_seq`)."""

    covers_through_seq: int
    covers_messages: int
    text: str


# The latest summary still valid (no covered message rolled back since), covering at most
# `upto` messages. The count runs on the primary key, only for the rows it looks at.
_LATEST = _sql(
    "SELECT s.covers_through_seq, s.covers_messages, s.text FROM helix.summaries s "
    "WHERE s.session_id = :sid AND s.covers_messages <= :upto "
    "AND s.covers_messages = (SELECT count(*) FROM helix.messages m "
    "WHERE m.session_id = s.session_id AND m.seq <= s.covers_through_seq) "
    "ORDER BY s.covers_through_seq DESC LIMIT 1"
)
# The summary and, only when this execution wrote it, the call's `llm` usage row (in
# `helix.usage_rows`: no message carries it, migration 0027; so
# usage queries, costs and usage limits count summaries; docs/database.md), in one
# statement: a crash leaves both or neither, and a step run again adds no second row.
_INSERT = _sql(
    "WITH s AS (INSERT INTO helix.summaries (session_id, covers_through_seq, covers_messages, "
    "text, model, input_tokens, output_tokens, run_id, step) VALUES (:sid, :seq, :n, :text, "
    ":model, :inp, :out, :rid, :step) ON CONFLICT (session_id, covers_through_seq) DO NOTHING "
    "RETURNING 1) INSERT INTO helix.usage_rows (session_id, run_id, usage_id, agent_name, step, "
    "kind, model, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, "
    "reasoning_tokens, success, cost_usd) SELECT :sid, :rid, :uid, :agent, :step, 'llm', "
    ":model, :inp, :out, :cread, :cwrite, :reason, true, CAST(:cost AS numeric) FROM s "
    "ON CONFLICT (usage_id) DO NOTHING"
)


async def latest_summary(conn: Executor, session_id: str, upto: int) -> SummaryRow | None:
    row = (await conn.execute(_LATEST, {"sid": session_id, "upto": upto})).first()
    return None if row is None else SummaryRow(int(row[0]), int(row[1]), str(row[2]))


@dataclass(frozen=True)
class NewSummary:
    """What a summary step writes."""

    session_id: str
    row: SummaryRow
    model: str | None
    input_tokens: int
    output_tokens: int
    run_id: str
    step: int
    agent_name: str = ""
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: Decimal | None = None


async def insert_summary(conn: Executor, new: NewSummary) -> None:
    """Write the summary and its usage row unless one with the same key exists (then the
    first stays)."""
    await conn.execute(
        _INSERT,
        {
            "sid": new.session_id,
            "seq": new.row.covers_through_seq,
            "n": new.row.covers_messages,
            "text": new.row.text,
            "model": new.model,
            "inp": new.input_tokens,
            "out": new.output_tokens,
            "rid": new.run_id,
            "step": new.step,
            "uid": f"{new.run_id}:{new.step}:summary:{new.row.covers_through_seq}",
            "agent": new.agent_name,
            "cread": new.cache_read_tokens,
            "cwrite": new.cache_write_tokens,
            "reason": new.reasoning_tokens,
            "cost": str(new.cost_usd) if new.cost_usd is not None else None,
        },
    )
