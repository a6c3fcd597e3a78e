"""Usage on the message rows (issue 48, cut 2; migration 0027): `helix.usage` is a view
of `helix.usage_rows` and the usage messages carry, and reads the same rows as before."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import forkserver
import pytest
from helpers import calls, lines, sql, wait_for
from release_code import PreviousRelease, previous_code
from sqlalchemy.ext.asyncio import create_async_engine
from test_crash import assert_transcript_is_clean, relaunch, sigkill, start_run

from helix_dbos import tool
from helix_dbos.store.database import sqlalchemy_url
from helix_dbos.store.migrations import applied_migrations, apply_migrations
from helix_dbos.store.rollback import roll_back_run

REPO = Path(__file__).resolve().parent.parent
APP = Path(__file__).parent / "apps" / "usage_app.py"
# The last commit before migration 0027: its code writes `helix.usage` as a table.
BEFORE = PreviousRelease("5277a4a56d5f468179f3a7e898372921a56eb11a", "before-0027")
COLUMNS = (
    "usage_id, session_id, run_id, agent_name, step, kind, model, input_tokens, "
    "output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, tool_name, "
    "duration_ms, success, created_at, cost_usd"
)


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return f"found {query}"


def _usage(url: str, where: str = "", *params: Any) -> list[tuple[Any, ...]]:
    return sql(url, f"SELECT {COLUMNS} FROM helix.usage {where} ORDER BY usage_id", *params)


def _normalized(rows: list[tuple[Any, ...]], run_ids: list[str]) -> list[tuple[Any, ...]]:
    """A run's rows without what differs between two runs of one script: ids, times."""
    out = []
    for r in rows:
        run = run_ids.index(r[2])
        out.append((run, r[0].replace(r[2], "R"), *r[3:13], r[14], r[16]))
    return sorted(out)


def _write(python: str, path: str | None, url: str, tmp: Path) -> list[str]:
    """Run tests/apps/usage_app.py on a build (`path` on PYTHONPATH; None: this one)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("HELIX_")}
    if path is not None:
        env["PYTHONPATH"] = path
    done = forkserver.run(
        [python, str(APP), url], env=env, cwd=tmp, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.crash
def test_rows_written_before_the_migration_read_the_same_and_match_new_ones(
    empty_database_url: str, tmp_path: Path
) -> None:
    url = empty_database_url
    old = previous_code(BEFORE, tmp_path / "old")
    (tmp_path / "w1").mkdir()
    old_runs = _write(old.python, old.path, url, tmp_path / "w1")
    assert "0027_usage_on_messages" not in applied_migrations(url)
    before = _usage(url)
    checkpoints = sql(url, "SELECT * FROM helix.session_checkpoints ORDER BY ord")
    assert len(before) == 2 * 6, "2 runs: 3 LLM calls and 2 + 1 tool calls each"

    assert apply_migrations(url)[0] == "0027_usage_on_messages"  # and those after it
    assert _usage(url) == before, "the view returns the table's rows, column for column"
    assert sql(url, "SELECT * FROM helix.session_checkpoints ORDER BY ord") == checkpoints
    assert sql(url, "SELECT count(*) FROM helix.messages WHERE usage_id IS NOT NULL") == [(0,)]

    (tmp_path / "w2").mkdir()
    new_runs = _write(sys.executable, None, url, tmp_path / "w2")
    new = _usage(url, "WHERE run_id = ANY(%s)", new_runs)
    assert _normalized(new, new_runs) == _normalized(before, old_runs)
    # The new runs' usage is carried by their messages: no row of its own.
    assert sql(
        url, "SELECT count(*) FROM ONLY helix.usage_rows WHERE run_id = ANY(%s)", new_runs
    ) == [(0,)]
    carried = sql(
        url,
        "SELECT role, kind, count(*) FROM helix.messages WHERE run_id = ANY(%s) "
        "AND usage_id IS NOT NULL GROUP BY 1, 2 ORDER BY 1, 2",
        new_runs,
    )
    assert carried == [("assistant", "llm", 6), ("tool", "tool", 6)]
    # Checkpoints count the same usage whichever side of the migration wrote it (step
    # checkpoints: a head is written only when a tool runs past 0.1 s, a matter of load).
    per_run = (
        "SELECT step, message_seq, llm_calls, tool_calls, subagent_calls, input_tokens, "
        "output_tokens, cache_read_tokens FROM helix.session_checkpoints WHERE run_id = %s "
        "AND kind = 'step' ORDER BY ord"
    )
    for old_run, new_run in zip(old_runs, new_runs, strict=True):
        assert sql(url, per_run, new_run) == sql(url, per_run, old_run)


async def one_lookup(helix: Any, make_agent: Any, mock_llm: Any) -> tuple[Any, Any]:
    """An agent, and its finished run of one tool call: two LLM calls, one tool call."""
    agent = make_agent(tools=[lookup])
    mock_llm.add_responses(
        calls(("l1", "lookup", {"query": "x"})),
        {"type": "text", "content": "done"},
        agent=agent.name,
    )
    return agent, await (await helix.execute(agent, "look")).result()


async def test_a_fork_copies_messages_but_not_their_usage(
    helix, make_agent, mock_llm, database_url
) -> None:
    agent, result = await one_lookup(helix, make_agent, mock_llm)
    source = await helix.get_usage(session_id=result.session_id)
    assert (source.llm_calls, source.tool_calls) == (2, 1)
    cps = await helix.checkpoints.list(result.session_id)
    fork = await helix.checkpoints.fork(result.session_id, at=cps[-1].checkpoint_id)

    assert _usage(database_url, "WHERE session_id = %s", fork) == []
    copied = sql(
        database_url,
        "SELECT count(*), count(usage_id), count(step) FROM helix.messages WHERE session_id = %s",
        fork,
    )
    assert copied == [(4, 0, 0)], "the transcript is copied, its usage is not"
    assert await helix.get_usage(session_id=result.session_id) == source
    mock_llm.add_responses({"type": "text", "content": "again"}, agent=agent.name)
    again = await (await helix.execute(agent, "more", session_id=fork)).result()
    assert again.status == "completed"
    forked = await helix.get_usage(session_id=fork)
    assert (forked.llm_calls, forked.tool_calls) == (1, 0), "only the fork's own call"
    last = (await helix.checkpoints.list(fork))[-1]
    assert (last.usage.llm_calls, last.usage.tool_calls) == (1, 0), (
        "a fork's timeline counts from its fork checkpoint (0), as before: nothing copied"
    )


async def test_a_rollback_moves_the_usage_its_messages_carry(
    helix, make_agent, mock_llm, database_url
) -> None:
    agent = make_agent(tools=[lookup])
    mock_llm.add_responses(
        calls(("l1", "lookup", {"query": "x"}), ("l2", "lookup", {"query": "y"})),
        {"type": "text", "content": "done"},
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "look")).result()
    rows = _usage(database_url, "WHERE run_id = %s", result.run_id)
    assert sorted(r[5] for r in rows) == ["llm", "llm", "tool", "tool"]
    assert sql(
        database_url, "SELECT count(*) FROM ONLY helix.usage_rows WHERE run_id = %s", result.run_id
    ) == [(0,)], "all of it carried by the run's messages"

    engine = create_async_engine(sqlalchemy_url(database_url))
    try:
        async with engine.begin() as conn:
            rolled = await roll_back_run(conn, result.run_id, "m-1")
    finally:
        await engine.dispose()
    assert (rolled.done, rolled.usage_rows) == (True, 4)
    assert _usage(database_url, "WHERE run_id = %s", result.run_id) == []
    audit = sql(
        database_url,
        f"SELECT {COLUMNS} FROM helix.rolled_back_usage WHERE run_id = %s ORDER BY usage_id",
        result.run_id,
    )
    assert audit == rows, "moved as rows, each once, with its values"
    usage = await helix.get_usage(session_id=result.session_id)
    assert (usage.llm_calls, usage.tool_calls) == (0, 0)


def test_a_kill_mid_run_leaves_one_usage_row_per_call(database_url: str, tmp_path: Path) -> None:
    proc, executor, run_id, session_id = start_run(database_url, "parallel", tmp_path)
    wait_for(lambda: (tmp_path / "in_slow_b").exists())
    sigkill(proc)
    outcome = relaunch(database_url, executor, "parallel", tmp_path, run_id)
    assert outcome["status"] == "completed", outcome

    assert_transcript_is_clean(database_url, session_id, run_id)
    llm_calls = len(lines(tmp_path, "llm.log"))
    rows = _usage(database_url, "WHERE run_id = %s", run_id)
    assert len({r[0] for r in rows}) == len(rows), "no usage id twice"
    by_kind = sorted((r[5], r[0].rsplit(":", 1)[-1]) for r in rows if r[5] != "llm")
    assert by_kind == [("tool", f"p{i}") for i in range(4)], "one row per tool call"
    assert sum(r[5] == "llm" for r in rows) == llm_calls == 2, "one row per LLM call"
    carried = sql(
        database_url,
        "SELECT tool_call_id, usage_id FROM helix.messages WHERE run_id = %s "
        "AND role = 'tool' AND tool_call_id LIKE 'p%%' ORDER BY tool_call_id",
        run_id,
    )
    assert carried == [(f"p{i}", f"{run_id}:1:tool:p{i}") for i in range(4)]


async def test_older_builds_statements_on_the_view_still_work(
    helix, make_agent, mock_llm, database_url
) -> None:
    """An older build writes `INSERT INTO helix.usage ... ON CONFLICT (usage_id) DO NOTHING`
    (and its rollback deletes from it): the view takes both, never twice the same id, and
    a delete of carried usage leaves the message."""
    agent, result = await one_lookup(helix, make_agent, mock_llm)
    rid, sid = result.run_id, result.session_id
    old_insert = (
        "INSERT INTO helix.usage (session_id, run_id, usage_id, agent_name, step, kind, "
        "model, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, "
        "reasoning_tokens, tool_name, duration_ms, success, cost_usd) VALUES "
        "(%s, %s, %s, 'a', %s, 'llm', 'm', 1, 1, 0, 0, 0, NULL, NULL, true, NULL) "
        "ON CONFLICT (usage_id) DO NOTHING"
    )
    carried = f"{rid}:1:llm"
    before = _usage(database_url, "WHERE run_id = %s", rid)
    sql(database_url, old_insert, sid, rid, carried, 1)  # a message carries this id
    assert _usage(database_url, "WHERE run_id = %s", rid) == before
    for _ in range(2):
        sql(database_url, old_insert, sid, rid, f"{rid}:9:llm", 9)
    assert sql(
        database_url, "SELECT usage_id FROM ONLY helix.usage_rows WHERE run_id = %s", rid
    ) == [(f"{rid}:9:llm",)]
    assert len(_usage(database_url, "WHERE run_id = %s", rid)) == len(before) + 1

    sql(database_url, "UPDATE helix.usage SET output_tokens = 42 WHERE usage_id = %s", carried)
    assert sql(
        database_url, "SELECT output_tokens FROM helix.messages WHERE usage_id = %s", carried
    ) == [(42,)]
    sql(database_url, "DELETE FROM helix.usage WHERE run_id = %s", rid)
    assert _usage(database_url, "WHERE run_id = %s", rid) == []
    assert sql(
        database_url, "SELECT count(*), count(usage_id) FROM helix.messages WHERE run_id = %s", rid
    ) == [(4, 0)], "the messages stay, without their usage"
