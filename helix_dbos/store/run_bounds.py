"""A run's first and last writes, and its outcome, each in one statement.

Most of what a short run costs is round trips, not work: opening a run on a new
session was ten statements, ending it four, and the caller read its result twice.
Data-modifying CTEs do each in one, with the same keys and guards as the general
paths in `repository` (which still open runs on existing sessions).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from helix_dbos.orchestration.messages import synthesize_finish_tool_result
from helix_dbos.orchestration.types import FINISH_TOOL_NAME, Message
from helix_dbos.store.repository import (
    _INSERT_CHUNKS,
    _MESSAGE_FIELDS,
    _MESSAGE_RECORDSET,
    _RUN_COLUMNS,
    OWNED,
    USAGE_KEYS,
    USAGE_SELECT,
    Owner,
    RunRow,
    SQLConnection,
    UsageRecord,
    _chunk_records,
    _json,
    _sql,
    _step_params,
    message_record,
    owner_params,
)
from helix_dbos.store.storable import storable_text

_LIVE = "('running', 'waiting', 'paused')"

# The session, its first run, the input and the `run_started` chunk; then the run's
# start lock (session-level: it outlives this statement's transaction, see
# `repository.lock_run_start`), taken before the rows commit.
_OPEN_NEW_SESSION_RUN = _sql(
    "WITH s AS (INSERT INTO helix.sessions (session_id, agent_name, state, status, "
    "turn_count, message_seq, chunk_seq) VALUES (:sid, :agent, CAST(:state AS jsonb), "
    "'running', 1, :nmsg, :nchunk) RETURNING 0 AS chunk_base), "
    "r AS (INSERT INTO helix.runs (run_id, session_id, workflow_id, agent_name, turn, "
    "max_steps, options, start_sequence) VALUES (:rid, :sid, :wid, :agent, 1, :max_steps, "
    "CAST(:options AS jsonb), 0) RETURNING 1), "
    "msg AS (INSERT INTO helix.messages (session_id, seq, run_id, role, content, tool_calls, "
    f"tool_call_id, tool_name, thinking, is_error, parts) SELECT :sid, 1 + m.ord, :rid, "
    f"{_MESSAGE_FIELDS} "
    f"FROM {_MESSAGE_RECORDSET} RETURNING 1), "
    f"ins AS ({_INSERT_CHUNKS} RETURNING 1) "
    "SELECT pg_advisory_lock(hashtextextended(:rid, 0))"
)


async def open_new_session_run(
    conn: SQLConnection,
    *,
    session_id: str,
    run_id: str,
    workflow_id: str,
    agent_name: str,
    state: dict[str, Any],
    max_steps: int,
    options: dict[str, Any],
    messages: Sequence[Message],
) -> None:
    """Create a session with its first run and take the run's start lock, in one
    autocommit statement on `conn` (which must stay open until the lock is released).
    The lock is held even if the statement fails: release it either way. It sends no
    NOTIFY: the caller wakes the session's readers after it (`WakeUps`)."""
    chunks = [(f"{run_id}:started", "run_started", {"turn": 1})]
    await conn.execute(
        _OPEN_NEW_SESSION_RUN,
        {
            "sid": session_id,
            "rid": run_id,
            "wid": workflow_id,
            "agent": agent_name,
            "state": _json(state),
            "max_steps": max_steps,
            "options": _json(options),
            "nmsg": len(messages),
            "rows": _json([{"ord": i, **message_record(m)} for i, m in enumerate(messages)]),
            "nchunk": len(chunks),
            "chunks": _chunk_records(chunks),
            "step": 0,
        },
    )


# The run's final status (only a live run takes it: an abort that got there first keeps
# its own), the session's likewise, and the terminal chunks, which land either way. A
# tool call of the run still without a result (its step's rows were lost, or could not
# be written) gets one in the same statement, so no transcript ends with a dangling
# call: the `__finish__` acknowledgement, or an error naming the run's end.
_END_RUN = _sql(
    "WITH r AS (UPDATE helix.runs SET step_count = :step, status = :status, "
    "output = CAST(:output AS json), error = :error, waiting_for = NULL, "
    f"finished_at = now(), stop_reason = :stop WHERE run_id = :rid AND status IN {_LIVE} "
    "RETURNING 1), "
    "d AS (SELECT c.call ->> 'id' AS id, c.call ->> 'name' AS name, "
    "row_number() OVER (ORDER BY m.seq, c.ord) AS ord FROM helix.messages m, "
    "jsonb_array_elements(m.tool_calls) WITH ORDINALITY AS c(call, ord) "
    "WHERE m.session_id = :sid AND m.run_id = :rid AND m.role = 'assistant' "
    "AND jsonb_typeof(m.tool_calls) = 'array' AND EXISTS (SELECT 1 FROM r) "
    "AND NOT EXISTS (SELECT 1 FROM helix.messages t WHERE t.session_id = :sid "
    "AND t.role = 'tool' AND t.tool_call_id = c.call ->> 'id')), "
    "s AS (UPDATE helix.sessions SET chunk_seq = chunk_seq + :nchunk, "
    "message_seq = CASE WHEN EXISTS (SELECT 1 FROM d) THEN GREATEST(message_seq, "
    "(SELECT COALESCE(max(seq), 0) FROM helix.messages WHERE session_id = :sid)) "
    "+ (SELECT count(*) FROM d) ELSE message_seq END, "
    "status = CASE WHEN EXISTS (SELECT 1 FROM r) THEN :status ELSE status END, "
    "output = CASE WHEN EXISTS (SELECT 1 FROM r) THEN CAST(:output AS jsonb) ELSE output END, "
    "error = CASE WHEN EXISTS (SELECT 1 FROM r) THEN :error ELSE error END, "
    "updated_at = CASE WHEN EXISTS (SELECT 1 FROM r) THEN now() ELSE updated_at END "
    "WHERE session_id = :sid RETURNING chunk_seq - :nchunk AS chunk_base, "
    "message_seq - (SELECT count(*) FROM d) AS msg_base), "
    "pair AS (INSERT INTO helix.messages (session_id, seq, run_id, role, content, "
    "tool_call_id, tool_name, is_error) SELECT :sid, s.msg_base + d.ord, :rid, 'tool', "
    "CASE WHEN d.name = :finish THEN :ack ELSE :unfinished END, d.id, d.name, "
    "d.name IS DISTINCT FROM :finish FROM s, d RETURNING 1), "
    f"ins AS ({_INSERT_CHUNKS} RETURNING 1) "
    "SELECT EXISTS (SELECT 1 FROM r), pg_notify('helix_chunks', :sid), "
    f"CASE WHEN :notify THEN pg_notify('helix_run_end', :rid) END, {OWNED}, u.* "
    f"FROM (SELECT {USAGE_SELECT} FROM helix.usage WHERE run_id = :rid) u"
)
_FINISH_ACK = synthesize_finish_tool_result("").content


def unfinished_call_error(status: str, error: str | None) -> str:
    """The result of a call whose run ended before the call's own result was written."""
    return f"Not completed: the run ended ({status})" + (f": {error}" if error else "")


@dataclass(frozen=True)
class EndedRun:
    """What the run's last write found: whether it ended the run (False when an abort
    got there first, or a replay finds it ended), and the run's usage; whether it
    deleted its workflow's DBOS datasource checkpoints too."""

    ended: bool
    usage: dict[str, int]
    checkpoints_dropped: bool = False


async def end_run(
    conn: SQLConnection,
    *,
    session_id: str,
    run_id: str,
    agent_name: str,
    step: int,
    status: str,
    output: Any,
    error: str | None,
    stop_reason: str | None,
    chunks: Sequence[tuple[str, str, Any]],
    notify: bool,
    owner: Owner | None = None,
) -> EndedRun:
    """End a live run and its session's turn (pairing each of its dangling tool calls),
    and read its usage (the step rows written before in the same transaction included).
    `notify` sends the run-end notification with the commit, for a run with nothing left
    to do after its last write."""
    row = (
        await conn.execute(
            _END_RUN,
            {
                "sid": session_id,
                "rid": run_id,
                "agent": agent_name,
                "step": step,
                "status": status,
                "output": _json(output),
                "error": storable_text(error) if error is not None else None,
                "stop": stop_reason,
                "nchunk": len(chunks),
                "chunks": _chunk_records(chunks) if chunks else "[]",
                "notify": notify,
                "finish": FINISH_TOOL_NAME,
                "ack": _FINISH_ACK,
                "unfinished": storable_text(unfinished_call_error(status, error)),
                **owner_params(owner),
            },
        )
    ).one()
    usage = {k: int(v) for k, v in zip(USAGE_KEYS, row[4:], strict=True)}
    return EndedRun(ended=bool(row[0]), usage=usage)


# A run's last step and its end in one call: `end_run` after `commit_step_rows`, with
# their keys and guards, written out in `helix.end_step_and_run` (migrations/0020). The
# step's rows land once (`runs.committed_step`, its head skipped if written before), the
# status only on a live run. Durable: its commit waits for the disk flush. A DBOS
# checkpoint that follows does not make up for one that did not: DBOS retries one whose
# connection was lost on the restarted server, after a crash that lost the write
# (`runtime/steps/commit.py`).
_END_STEP_AND_RUN = _sql(
    "SELECT * FROM helix.end_step_and_run(:sid, :rid, :agent, CAST(:step AS int), :rows, "
    "CAST(:nmsg AS int), CAST(:nhead AS int), :state, :usage, :chunks, CAST(:nchunk AS int), "
    "CAST(:nstep AS int), :status, :output, :error, :stop, CAST(:notify AS boolean), :dsc, "
    ":ow, :ox, CAST(:wake AS boolean))"
)


async def end_step_and_run(
    conn: SQLConnection,
    *,
    session_id: str,
    run_id: str,
    agent_name: str,
    step: int,
    messages: Sequence[Message],
    state: dict[str, Any] | None,
    usage: Sequence[UsageRecord],
    step_chunks: Sequence[tuple[str, str, Any]],
    head_messages: int,
    status: str,
    output: Any,
    error: str | None,
    stop_reason: str | None,
    end_chunks: Sequence[tuple[str, str, Any]],
    notify: bool,
    owner: Owner | None = None,
    drop_checkpoints_of: str | None = None,
    wake: bool = True,
) -> EndedRun:
    """The run's last step (`commit_step_rows`) and its end (`end_run`) in one autocommit
    call of `helix.end_step_and_run`: one round trip and one commit fewer on every run.
    `drop_checkpoints_of`: a workflow whose DBOS datasource checkpoints it deletes too,
    under the same owner guard (`dbos_internals.checkpoints_workflow`). `wake` False: it
    sends no NOTIFY (the session's chunks; with `notify`, the run's end), and the caller
    sends them after it (`WakeUps`)."""
    params = _step_params(
        session_id,
        run_id,
        agent_name,
        step,
        messages,
        usage,
        [*step_chunks, *end_chunks],
        state,
        head_messages,
    )
    params.update(
        status=status,
        output=_json(output),
        error=storable_text(error) if error is not None else None,
        stop=stop_reason,
        nstep=len(step_chunks),
        # the step's chunks in one row (migration 0028), the end's one row each
        chunks=_chunk_records([*step_chunks, *end_chunks], grouped=len(step_chunks)),
        notify=notify,
        dsc=drop_checkpoints_of,
        wake=wake,
    )
    params.update(owner_params(owner))
    row = (await conn.execute(_END_STEP_AND_RUN, params)).one()
    usage_totals = {k: int(v) for k, v in zip(USAGE_KEYS, row[1:], strict=True)}
    return EndedRun(
        ended=bool(row[0]),
        usage=usage_totals,
        checkpoints_dropped=drop_checkpoints_of is not None,
    )


@dataclass(frozen=True)
class RunOutcome:
    """A run's row with what its caller's result holds besides: the stop reason,
    whether it ran in seed 004's terminating mode, and its usage."""

    run: RunRow
    stop_reason: str | None
    terminating: bool
    usage: dict[str, int]


_RUN_OUTCOME = _sql(
    f"SELECT {_RUN_COLUMNS}, "
    "COALESCE(jsonb_typeof(options -> 'terminating') = 'object', false), u.* "
    f"FROM helix.runs, LATERAL (SELECT {USAGE_SELECT} FROM helix.usage "
    "WHERE usage.run_id = :rid) u WHERE run_id = :rid"
)


async def run_outcome(conn: SQLConnection, run_id: str) -> RunOutcome | None:
    """The run's row, stop reason, mode and usage in one query; None if no such run."""
    row = (await conn.execute(_RUN_OUTCOME, {"rid": run_id})).first()
    if row is None:
        return None
    width = len(RunRow.__dataclass_fields__)
    usage = row[width + 1 :]
    run = RunRow(*row[:width])
    return RunOutcome(
        run=run,
        stop_reason=run.stop_reason,
        terminating=bool(row[width]),
        usage={k: int(v) for k, v in zip(USAGE_KEYS, usage, strict=True)},
    )
