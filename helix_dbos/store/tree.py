"""SQL over a session and every session below it (sub-agents, companions, theirs).

Seed 002: "Submissions always go against the ROOT sessionId", so what a session waits
for, and what stopping it reaches, is read over its whole tree (`parent_session_id`,
indexed), with each session's depth below the one asked about.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import TextClause, text

from helix_dbos.orchestration.usage_limits import TreeUsage
from helix_dbos.store.repository import SQLConnection

_LIVE = "('running', 'waiting', 'paused')"
# `:sid` and every session below it, with its agent and its depth (0: `:sid` itself).
_TREE = (
    "WITH RECURSIVE tree AS (SELECT session_id, agent_name, 0 AS depth FROM helix.sessions "
    "WHERE session_id = :sid UNION ALL SELECT s.session_id, s.agent_name, t.depth + 1 "
    "FROM helix.sessions s JOIN tree t ON s.parent_session_id = t.session_id) "
)


@functools.lru_cache(maxsize=16)
def _sql(statement: str) -> TextClause:
    return text(statement)


@dataclass(frozen=True)
class TreeCall:
    """A pending call of the session or of a session below it."""

    session_id: str  # the session whose run waits (a sub-agent's, for depth > 0)
    agent_name: str
    depth: int
    tool_call_id: str
    run_id: str
    tool_name: str
    kind: str
    input: Any
    answered_at: datetime | None
    deadline_at: datetime | None


@dataclass(frozen=True)
class TreeRun:
    """A live run of the session or of a session below it."""

    session_id: str
    depth: int
    run_id: str
    workflow_id: str
    agent_name: str


async def pending_calls(conn: SQLConnection, session_id: str) -> list[TreeCall]:
    """The tree's pending calls: the session's own first, then by depth, oldest first."""
    rows = await conn.execute(
        _sql(
            _TREE + "SELECT c.session_id, tree.agent_name, tree.depth, c.tool_call_id, "
            "c.run_id, c.tool_name, c.kind, c.input, c.answered_at, c.deadline_at "
            "FROM tree JOIN helix.tool_calls c ON c.session_id = tree.session_id "
            "WHERE c.status = 'pending' ORDER BY tree.depth, c.created_at, c.tool_call_id"
        ),
        {"sid": session_id},
    )
    return [TreeCall(*r) for r in rows]


async def live_runs(conn: SQLConnection, session_id: str) -> list[TreeRun]:
    """The tree's live runs, top down: the session's own (if any) first."""
    rows = await conn.execute(
        _sql(
            _TREE + "SELECT r.session_id, tree.depth, r.run_id, r.workflow_id, r.agent_name "
            f"FROM tree JOIN helix.runs r ON r.session_id = tree.session_id "
            f"WHERE r.status IN {_LIVE} ORDER BY tree.depth, r.started_at, r.run_id"
        ),
        {"sid": session_id},
    )
    return [TreeRun(*r) for r in rows]


# Each run's LLM calls and those of every session below its session since it started
# (issue 50's usage limits), for one run or several at once (a child checks each of its
# limited ancestors' trees). `subagent` usage rows are left out: a local child's repeat
# its llm rows. A remote child's llm rows live on its own server: its tokens, as that
# server reported them when it ended, are on its `remote_children` row (the run's own
# calls, and those of the sessions below since the run started), counted as tokens, not
# requests. A run's own rows are in its session, never in a session below it: the two
# parts of each sum never overlap.
_TREES_USAGE = (
    "WITH RECURSIVE run AS (SELECT run_id, session_id, started_at FROM helix.runs "
    "WHERE run_id = ANY(CAST(:rids AS text[]))), "
    "tree AS (SELECT r.run_id, s.session_id FROM helix.sessions s JOIN run r "
    "ON s.parent_session_id = r.session_id UNION ALL SELECT t.run_id, s.session_id FROM "
    "helix.sessions s JOIN tree t ON s.parent_session_id = t.session_id), "
    "llm AS (SELECT u.run_id, u.input_tokens, u.output_tokens, u.cost_usd FROM helix.usage u "
    "JOIN run r USING (run_id) WHERE u.kind = 'llm' UNION ALL SELECT t.run_id, "
    "u.input_tokens, u.output_tokens, u.cost_usd FROM tree t JOIN run r USING (run_id) "
    "JOIN helix.usage u ON u.session_id = t.session_id AND u.kind = 'llm' "
    "AND u.created_at >= r.started_at), "
    "remote AS (SELECT c.parent_run_id AS run_id, c.input_tokens, c.output_tokens "
    "FROM helix.remote_children c JOIN run r ON c.parent_run_id = r.run_id UNION ALL "
    "SELECT t.run_id, c.input_tokens, c.output_tokens FROM tree t JOIN run r USING (run_id) "
    "JOIN helix.remote_children c ON c.parent_session_id = t.session_id "
    "AND c.created_at >= r.started_at) "
    "SELECT r.run_id, COALESCE(l.n, 0), COALESCE(l.inp, 0) + COALESCE(m.inp, 0), "
    "COALESCE(l.outp, 0) + COALESCE(m.outp, 0), COALESCE(l.cost, 0) FROM run r "
    "LEFT JOIN (SELECT run_id, count(*) AS n, COALESCE(sum(input_tokens), 0) AS inp, "
    "COALESCE(sum(output_tokens), 0) AS outp, COALESCE(sum(cost_usd), 0) AS cost "
    "FROM llm GROUP BY run_id) l USING (run_id) "
    "LEFT JOIN (SELECT run_id, COALESCE(sum(input_tokens), 0) AS inp, "
    "COALESCE(sum(output_tokens), 0) AS outp FROM remote GROUP BY run_id) m USING (run_id)"
)


async def trees_usage(conn: SQLConnection, run_ids: Sequence[str]) -> dict[str, TreeUsage]:
    """What each run and its descendants have used so far, in one statement: the run's
    own LLM calls, those recorded below its session since it started, and the tokens its
    remote children (and theirs below) reported once they ended. A run without a row
    (not opened) is missing from the answer."""
    rows = await conn.execute(_sql(_TREES_USAGE), {"rids": list(dict.fromkeys(run_ids))})
    return {r[0]: TreeUsage(int(r[1]), int(r[2]), int(r[3]), Decimal(r[4])) for r in rows}


async def run_input(conn: SQLConnection, run_id: str) -> str:
    """The user messages the run started with, joined: what its input guardrails check."""
    row = (
        await conn.execute(
            _sql(
                "SELECT COALESCE(string_agg(content, E'\\n' ORDER BY seq), '') "
                "FROM helix.messages WHERE run_id = :rid AND role = 'user'"
            ),
            {"rid": run_id},
        )
    ).one()
    return str(row[0])
