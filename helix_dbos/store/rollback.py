"""Rolling a run back (double texting's `rollback`): its messages and usage (its rows and
the usage its messages carry) leave the session's visible history for audit tables, its
checkpoints leave the timeline, and the session's state goes back to what it was when the
run started."""

from __future__ import annotations

from dataclasses import dataclass

from helix_dbos.store.repository import Executor, _sql

_LIVE = "('running', 'waiting', 'paused')"
# A message's columns, named: `helix.messages` gained `parts` (migration 0022) after
# `rolled_back_messages` was made like it, so a positional copy would misplace it.
_COLUMNS = (
    "session_id, seq, run_id, role, content, tool_calls, tool_call_id, tool_name, thinking, "
    "is_error, created_at, parts, step"
)
# A usage row's columns: `helix.messages` has them too, set on a message that carries
# usage (migration 0027), so a rolled-back run's usage moves as rows wherever it was.
_USAGE = (
    "usage_id, session_id, run_id, agent_name, step, kind, model, input_tokens, "
    "output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, tool_name, "
    "duration_ms, success, created_at, cost_usd"
)


# The rows of a rolled-back run leave the visible history for the audit tables, and the
# session's state goes back to what it was when the run started. Its step keys move to
# the end, so a late write of the aborted run (a step still finishing) claims nothing.
_ROLL_BACK = _sql(
    "WITH r AS (UPDATE helix.runs SET rolled_back_at = now(), rolled_back_by = :mid, "
    "committed_step = 2147483647, committed_head = 2147483647 "
    f"WHERE run_id = :rid AND rolled_back_at IS NULL AND status NOT IN {_LIVE} "
    "RETURNING session_id, state_at_start), "
    "m AS (DELETE FROM helix.messages WHERE run_id = :rid AND EXISTS (SELECT 1 FROM r) "
    "RETURNING *), "
    f"mi AS (INSERT INTO helix.rolled_back_messages ({_COLUMNS}, rolled_back_by) "
    f"SELECT {_COLUMNS}, :mid FROM m RETURNING 1), "
    # ONLY: the messages are a child of `usage_rows`; they leave through `m`.
    "u AS (DELETE FROM ONLY helix.usage_rows WHERE run_id = :rid AND EXISTS (SELECT 1 FROM r) "
    "RETURNING *), "
    f"ui AS (INSERT INTO helix.rolled_back_usage ({_USAGE}, rolled_back_by) "
    f"SELECT {_USAGE}, :mid FROM u UNION ALL SELECT {_USAGE}, :mid FROM m "
    "WHERE m.usage_id IS NOT NULL RETURNING 1), "
    "s AS (UPDATE helix.sessions SET state = COALESCE(r.state_at_start, sessions.state), "
    "updated_at = now() FROM r WHERE sessions.session_id = r.session_id RETURNING 1) "
    "SELECT EXISTS (SELECT 1 FROM r), (SELECT count(*) FROM mi), (SELECT count(*) FROM ui)"
)


@dataclass(frozen=True)
class RolledBack:
    done: bool  # False: not found ended, or rolled back before
    messages: int
    usage_rows: int


async def roll_back_run(conn: Executor, run_id: str, message_id: str) -> RolledBack:
    """Remove an ended run from its session's visible history (see `_ROLL_BACK`), its
    checkpoints too (time travel's timeline: derived rows, so dropped, not kept). Its
    derived checkpoints go with its messages; its stored rows go in a statement of their
    own: moving the step keys fires the checkpoint trigger at the end of `_ROLL_BACK`,
    whose row goes with the rest. A prune's `base` row stays: the checkpoints after it
    read their state and usage from it (migration 0030)."""
    row = (await conn.execute(_ROLL_BACK, {"rid": run_id, "mid": message_id})).one()
    rolled = RolledBack(bool(row[0]), int(row[1]), int(row[2]))
    if rolled.done:
        await conn.execute(
            _sql("DELETE FROM helix.checkpoints WHERE run_id = :rid AND kind <> 'base'"),
            {"rid": run_id},
        )
    return rolled
