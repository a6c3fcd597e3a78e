"""What the checkpoint trigger of migration 0013 gave, beside what `helix.session_checkpoints`
lists now (migration 0030 derives most step checkpoints): a shadow of every checkpoint.

`install` adds, in a schema of its own (`test_shadow`), migration 0013's trigger function
verbatim but for its table and sequence, fired by a trigger on `helix.runs` with 0013's
condition (every step and head), a copy of each fork's first row (forks insert it
themselves), and 0013's view over the shadow table. The autouse fixture `shadow_checkpoints`
(imported into a test module) installs it and, after each test, asserts that every session
the test touched lists exactly the shadow's checkpoints: the same ids, in the same order,
with the same message_seq, state, usage and created_at. A pruned session lists the
shadow's last ones; a rolled-back run's shadow rows go as its stored rows do. It also
asserts that each checkpoint read alone (`helix.session_checkpoint`, as `checkpoints.get`
reads it since migration 0032) is the one listed, and that the whole timeline
(`helix.checkpoint_timeline`: unlisted rows and prune's columns too) is what migration
0030's view, kept here verbatim, gives."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from helix_dbos.store.database import libpq_url
from helix_dbos.store.migrations import apply_migrations

_INSTALL = """
CREATE SCHEMA IF NOT EXISTS test_shadow;
CREATE SEQUENCE IF NOT EXISTS test_shadow.ord;
CREATE TABLE IF NOT EXISTS test_shadow.checkpoints (
    session_id text NOT NULL, ord bigint NOT NULL DEFAULT nextval('test_shadow.ord'),
    run_id text, step integer NOT NULL, kind text NOT NULL, message_seq integer NOT NULL,
    state jsonb, state_ord bigint NOT NULL,
    llm_calls integer NOT NULL DEFAULT 0, tool_calls integer NOT NULL DEFAULT 0,
    subagent_calls integer NOT NULL DEFAULT 0, input_tokens bigint NOT NULL DEFAULT 0,
    output_tokens bigint NOT NULL DEFAULT 0, cache_read_tokens bigint NOT NULL DEFAULT 0,
    cache_write_tokens bigint NOT NULL DEFAULT 0, reasoning_tokens bigint NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (session_id, ord));

CREATE OR REPLACE FUNCTION test_shadow.record_checkpoint() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    is_step  boolean := NEW.committed_step > OLD.committed_step;
    at_step  integer := CASE WHEN NEW.committed_step > OLD.committed_step
                             THEN NEW.committed_step ELSE NEW.committed_head END;
    new_ord  bigint := nextval('test_shadow.ord');
    ses      record;
    prev     record;
    base     record;
    u        record;
    before   jsonb;
    changed  boolean := true;
BEGIN
    SELECT message_seq, state INTO ses FROM helix.sessions WHERE session_id = NEW.session_id;
    SELECT c.ord, c.state, c.state_ord INTO prev FROM test_shadow.checkpoints c
        WHERE c.session_id = NEW.session_id ORDER BY c.ord DESC LIMIT 1;
    IF FOUND THEN
        before := prev.state;
        IF before IS NULL THEN
            SELECT c.state INTO before FROM test_shadow.checkpoints c
                WHERE c.session_id = NEW.session_id AND c.ord = prev.state_ord;
        END IF;
        changed := before IS DISTINCT FROM ses.state;
    END IF;
    SELECT c.llm_calls, c.tool_calls, c.subagent_calls, c.input_tokens, c.output_tokens,
           c.cache_read_tokens, c.cache_write_tokens, c.reasoning_tokens INTO base
        FROM test_shadow.checkpoints c
        WHERE c.session_id = NEW.session_id AND c.kind <> 'head' ORDER BY c.ord DESC LIMIT 1;
    SELECT count(*) FILTER (WHERE kind = 'llm') AS llm_calls,
           count(*) FILTER (WHERE kind = 'tool') AS tool_calls,
           count(*) FILTER (WHERE kind = 'subagent') AS subagent_calls,
           COALESCE(sum(input_tokens) FILTER (WHERE kind <> 'subagent'), 0) AS input_tokens,
           COALESCE(sum(output_tokens) FILTER (WHERE kind <> 'subagent'), 0) AS output_tokens,
           COALESCE(sum(cache_read_tokens) FILTER (WHERE kind <> 'subagent'), 0) AS cache_read_tokens,
           COALESCE(sum(cache_write_tokens) FILTER (WHERE kind <> 'subagent'), 0) AS cache_write_tokens,
           COALESCE(sum(reasoning_tokens) FILTER (WHERE kind <> 'subagent'), 0) AS reasoning_tokens
        INTO u FROM helix.usage WHERE run_id = NEW.run_id AND step = at_step;
    INSERT INTO test_shadow.checkpoints (session_id, ord, run_id, step, kind,
        message_seq, state, state_ord, llm_calls, tool_calls, subagent_calls, input_tokens,
        output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens)
    VALUES (NEW.session_id, new_ord, NEW.run_id, at_step, CASE WHEN is_step THEN 'step' ELSE 'head' END, ses.message_seq,
        CASE WHEN changed THEN ses.state END,
        CASE WHEN changed THEN new_ord ELSE prev.state_ord END,
        COALESCE(base.llm_calls, 0) + u.llm_calls,
        COALESCE(base.tool_calls, 0) + u.tool_calls,
        COALESCE(base.subagent_calls, 0) + u.subagent_calls,
        COALESCE(base.input_tokens, 0) + u.input_tokens,
        COALESCE(base.output_tokens, 0) + u.output_tokens,
        COALESCE(base.cache_read_tokens, 0) + u.cache_read_tokens,
        COALESCE(base.cache_write_tokens, 0) + u.cache_write_tokens,
        COALESCE(base.reasoning_tokens, 0) + u.reasoning_tokens);
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION test_shadow.copy_fork() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    new_ord bigint := nextval('test_shadow.ord');
BEGIN
    INSERT INTO test_shadow.checkpoints (session_id, ord, run_id, step, kind, message_seq,
        state, state_ord, created_at)
    VALUES (NEW.session_id, new_ord, NULL, 0, 'fork', NEW.message_seq, NEW.state, new_ord,
        NEW.created_at);
    RETURN NULL;
END $$;

-- A rolled-back run's checkpoints leave (store/rollback.py deletes its stored rows).
CREATE OR REPLACE FUNCTION test_shadow.forget_run() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM helix.runs r WHERE r.run_id = OLD.run_id
               AND r.rolled_back_at IS NOT NULL) THEN
        DELETE FROM test_shadow.checkpoints WHERE run_id = OLD.run_id;
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE VIEW test_shadow.session_checkpoints AS
SELECT c.session_id, c.ord,
       CASE c.kind WHEN 'fork' THEN c.session_id || ':fork'
                   WHEN 'head' THEN c.run_id || ':' || c.step || ':head'
                   ELSE c.run_id || ':' || c.step END AS checkpoint_id,
       c.run_id, c.step, c.kind, c.message_seq,
       COALESCE(c.state, (SELECT x.state FROM test_shadow.checkpoints x
                          WHERE x.session_id = c.session_id AND x.ord = c.state_ord)) AS state,
       c.llm_calls, c.tool_calls, c.input_tokens, c.output_tokens, c.cache_read_tokens,
       c.cache_write_tokens, c.reasoning_tokens, c.subagent_calls, c.created_at
FROM test_shadow.checkpoints c;

DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'zz_shadow_checkpoint') THEN
        CREATE TRIGGER zz_shadow_checkpoint
            AFTER UPDATE OF committed_step, committed_head ON helix.runs
            FOR EACH ROW
            WHEN (NEW.committed_step > OLD.committed_step
                  OR NEW.committed_head > OLD.committed_head)
            EXECUTE FUNCTION test_shadow.record_checkpoint();
        CREATE TRIGGER zz_shadow_forget AFTER DELETE ON helix.checkpoints
            FOR EACH ROW WHEN (OLD.run_id IS NOT NULL)
            EXECUTE FUNCTION test_shadow.forget_run();
        CREATE TRIGGER zz_shadow_fork AFTER INSERT ON helix.checkpoints
            FOR EACH ROW WHEN (NEW.kind = 'fork')
            EXECUTE FUNCTION test_shadow.copy_fork();
    END IF;
END $$;
"""

_COLUMNS = (
    "checkpoint_id, run_id, step, kind, message_seq, state, llm_calls, tool_calls, "
    "input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, "
    "subagent_calls, created_at"
)


# Migration 0030's view `helix.checkpoint_timeline`, verbatim but for its name: migration
# 0032 computes the same rows another way, and `compare` checks it did (every column,
# prune's and the unlisted rows too).
_MIGRATION_0030 = (
    Path(__file__).resolve().parent.parent / "migrations" / "0030_derived_checkpoints.sql"
).read_text()
_VIEW_AT = _MIGRATION_0030.index("CREATE OR REPLACE VIEW helix.checkpoint_timeline AS")
_VIEW_END = _MIGRATION_0030.index("COMMENT ON VIEW helix.checkpoint_timeline")
_TIMELINE_0030 = _MIGRATION_0030[_VIEW_AT:_VIEW_END].replace(
    "VIEW helix.checkpoint_timeline AS", "VIEW test_shadow.timeline_0030 AS"
)


def _install_timeline_0030(database_url: str) -> bool:
    """Migration 0030's timeline view beside this build's, once 0030 is applied."""
    with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
        found = conn.execute(
            "SELECT to_regprocedure('helix.checkpoint_ord_at(integer)')"
        ).fetchone()
        if not found or found[0] is None:
            return False
        conn.execute("SELECT pg_advisory_lock(4242)")
        try:
            exists = conn.execute("SELECT to_regclass('test_shadow.timeline_0030')").fetchone()
            if not exists or exists[0] is None:
                conn.execute(_TIMELINE_0030)
        finally:
            conn.execute("SELECT pg_advisory_unlock(4242)")
    return True


def install(database_url: str) -> None:
    """Install the shadow (idempotent); on a database without helix's schema yet, after
    applying the migrations (as `launch` would)."""
    with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
        found = conn.execute("SELECT to_regclass('helix.runs')").fetchone()
        if not found or found[0] is None:
            apply_migrations(database_url)
        conn.execute("SELECT pg_advisory_lock(4242)")
        try:
            conn.execute(_INSTALL)
        finally:
            conn.execute("SELECT pg_advisory_unlock(4242)")


def high_water(database_url: str) -> int:
    with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
        row = conn.execute("SELECT COALESCE(max(ord), 0) FROM test_shadow.checkpoints").fetchone()
        return int(row[0]) if row else 0


def compare(database_url: str, *, since: int = 0) -> dict[str, int]:
    """Assert that each session with shadow rows past `since` lists the shadow's
    checkpoints, read in one snapshot; how many each session listed."""
    listed: dict[str, int] = {}
    with_0030 = _install_timeline_0030(database_url)
    with psycopg.connect(libpq_url(database_url)) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        sessions = [
            r[0]
            for r in conn.execute(
                "SELECT DISTINCT session_id FROM test_shadow.checkpoints WHERE ord > %s", (since,)
            )
        ]
        for sid in sessions:
            derived = _rows(conn, "helix.session_checkpoints", sid)
            shadow = _rows(conn, "test_shadow.session_checkpoints", sid)
            pruned = conn.execute(
                "SELECT EXISTS (SELECT 1 FROM helix.checkpoints WHERE session_id = %s "
                "AND kind = 'base')",
                (sid,),
            ).fetchone()
            if pruned and pruned[0]:
                shadow = shadow[len(shadow) - len(derived) :] if derived else []
            assert derived == shadow, (sid, _diff(derived, shadow))
            if with_0030:
                now = _timeline(conn, "helix.checkpoint_timeline", sid)
                before = _timeline(conn, "test_shadow.timeline_0030", sid)
                assert now == before, (sid, _diff(now, before))
            one_by_one = _one_by_one(conn, sid)
            if one_by_one is not None:
                assert one_by_one == derived, (sid, _diff(one_by_one, derived))
            listed[sid] = len(derived)
    return listed


def _timeline(conn: psycopg.Connection[Any], view: str, sid: str) -> list[tuple[Any, ...]]:
    return list(conn.execute(f"SELECT * FROM {view} WHERE session_id = %s ORDER BY ord", (sid,)))


def _one_by_one(conn: psycopg.Connection[Any], sid: str) -> list[tuple[Any, ...]] | None:
    """Each listed checkpoint as `helix.session_checkpoint` reads it alone (what
    `checkpoints.get` and a fork read: computed without the session's windows, migration
    0032), in the view's order; None on a database from before that migration. An id
    the session does not have reads nothing."""
    found = conn.execute(
        "SELECT to_regprocedure('helix.session_checkpoint(text, text)')"
    ).fetchone()
    if not found or found[0] is None:
        return None
    columns = ", ".join(f"c.{col.strip()}" for col in _COLUMNS.split(","))
    rows = list(
        conn.execute(
            f"SELECT {columns} FROM helix.session_checkpoints v "
            "CROSS JOIN LATERAL helix.session_checkpoint(v.session_id, v.checkpoint_id) c "
            "WHERE v.session_id = %s ORDER BY v.ord",
            (sid,),
        )
    )
    none = conn.execute(
        "SELECT count(*) FROM helix.session_checkpoint(%s, %s)", (sid, "run_none:1")
    ).fetchone()
    assert none == (0,), sid
    return rows


def _rows(conn: psycopg.Connection[Any], view: str, sid: str) -> list[tuple[Any, ...]]:
    return list(
        conn.execute(f"SELECT {_COLUMNS} FROM {view} WHERE session_id = %s ORDER BY ord", (sid,))
    )


def _diff(a: list[tuple[Any, ...]], b: list[tuple[Any, ...]]) -> list[Any]:
    out: list[Any] = [f"{len(a)} listed, {len(b)} by the trigger"]
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else None
        y = b[i] if i < len(b) else None
        if x != y:
            out.append((i, x, y))
    return out[:8]


@pytest.fixture(autouse=True)
def shadow_checkpoints(database_url: str) -> Iterator[None]:
    """After the test: every session it touched lists what migration 0013's trigger gave."""
    install(database_url)
    since = high_water(database_url)
    yield
    compare(database_url, since=since)
