"""One durable stream-chunk row per agent step (issue 48, cut 3; migration 0028): a step's
events are one `helix.stream_chunks` row, each event at its own seq, and every reader
gets the same events as before, from any seq."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import forkserver
import httpx
import pytest
from helpers import calls, sql, wait_for
from live_server import serve
from pydantic import BaseModel
from release_code import Interpreter, PreviousRelease, previous_code
from sqlalchemy.ext.asyncio import create_async_engine
from test_crash import relaunch, sigkill, start_run

from helix_dbos import ToolContext, sub_agent_tool, tool
from helix_dbos.runtime.loop import slow_head
from helix_dbos.runtime.steps import tool_step
from helix_dbos.server import create_app
from helix_dbos.store import repository as repo
from helix_dbos.store.database import sqlalchemy_url
from helix_dbos.store.migrations import applied_migrations, apply_migrations
from helix_dbos.store.repository import _step_groups

Event = tuple[int, str, str, dict[str, Any]]  # seq, session, type, payload


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return f"found {query}"


@tool
async def noisy(topic: str, ctx: ToolContext) -> str:
    """Report progress twice, then answer."""
    await ctx.emit("progress", {"topic": topic, "at": 1})
    await ctx.emit("progress", {"topic": topic, "at": 2})
    return f"noted {topic}"


@pytest.fixture(autouse=True)
def no_live_tool_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tool past 0.1 s (any tool on a loaded box) has its `tool_start` written live, a
    row of its own: these tests count rows, so here none is that slow."""
    monkeypatch.setattr(tool_step, "LIVE_TOOL_START_SECONDS", 60.0)
    monkeypatch.setattr(slow_head, "LIVE_TOOL_START_SECONDS", 60.0)


async def stream(helix: Any, session_id: str, after: int = 0) -> list[Event]:
    """What a resuming reader gets (`helix.stream`, the path of SSE, AG-UI, AI SDK, A2A)."""
    return [
        (c.seq, c.session_id, c.type, c.payload)
        async for c in helix.stream(session_id, after_seq=after, follow=False)
    ]


def view(database_url: str, session_id: str) -> list[Event]:
    """The same stream through `helix.stream_events`, the view SQL users read."""
    rows = sql(
        database_url,
        "SELECT seq, COALESCE(source_session_id, session_id), type, payload "
        "FROM helix.stream_events WHERE session_id = %s ORDER BY seq",
        session_id,
    )
    return [(r[0], r[1], r[2], r[3]) for r in rows]


async def assert_resumes_anywhere(helix: Any, session_id: str, events: list[Event]) -> None:
    """From every seq, before, inside and after each row, a reader gets exactly the rest."""
    seqs = [e[0] for e in events]
    assert seqs == sorted(set(seqs)), "each event once, in order"
    for after in range(0, seqs[-1] + 1):
        assert await stream(helix, session_id, after) == [e for e in events if e[0] > after]


async def paged(database_url: str, session_id: str, limit: int) -> list[int]:
    """`load_chunks` page by page, `limit` events a page, as the SSE loop reads."""
    engine = create_async_engine(sqlalchemy_url(database_url))
    seen: list[int] = []
    try:
        async with engine.connect() as conn:
            while True:
                rows = await repo.load_chunks(
                    conn, session_id, after_seq=seen[-1] if seen else 0, limit=limit
                )
                assert len(rows) <= limit
                if not rows:
                    return seen
                seen += [r[0] for r in rows]
    finally:
        await engine.dispose()


def step_rows(database_url: str, run_id: str) -> list[tuple[Any, ...]]:
    return sql(
        database_url,
        "SELECT step, type, jsonb_array_length(prior_events) FROM helix.stream_chunks "
        "WHERE run_id = %s ORDER BY seq",
        run_id,
    )


async def test_a_steps_events_are_one_row_and_a_reader_resumes_after_any_of_them(
    helix, make_agent, mock_llm, database_url
) -> None:
    agent = make_agent(tools=[lookup, noisy])
    mock_llm.add_responses(
        calls(("l1", "lookup", {"query": "a"}), ("n1", "noisy", {"topic": "b"})),
        calls(("l2", "lookup", {"query": "c"})),
        {"type": "text", "content": "done"},
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "go")).result()
    assert result.status == "completed", result.error

    assert step_rows(database_url, result.run_id) == [
        (0, "run_started", None),
        (1, "tool_end", 5),  # tool_start, tool_end of l1; tool_start, 2 custom, tool_end of n1
        (2, "tool_end", 1),
        (3, "text_delta", None),  # live, as ever
        (3, "output", None),
        (3, "run_completed", None),
    ]
    events = await stream(helix, result.session_id)
    own = [e for e in events if e[2] != "run_started" or e[3]["turn"] == 1]
    assert [(e[2], e[3].get("tool_call_id") or e[3].get("event")) for e in own] == [
        ("run_started", None),
        ("tool_start", "l1"),
        ("tool_end", "l1"),
        ("tool_start", "n1"),
        ("custom", "progress"),
        ("custom", "progress"),
        ("tool_end", "n1"),
        ("tool_start", "l2"),
        ("tool_end", "l2"),
        ("text_delta", None),
        ("output", None),
        ("run_completed", None),
    ]
    assert [e[0] for e in events] == list(range(events[0][0], events[0][0] + len(events))), (
        "every event its own seq, numbered as before: no gap, none shared"
    )
    assert [e[3]["data"]["at"] for e in events if e[2] == "custom"] == [1, 2]
    assert view(database_url, result.session_id) == events
    await assert_resumes_anywhere(helix, result.session_id, events)
    for limit in (1, 2, 3, 500):
        assert await paged(database_url, result.session_id, limit) == [e[0] for e in events]


def sse_events(url: str, session_id: str, run_id: str, last_event_id: int) -> list[tuple[int, str]]:
    """(id, event) of each chunk `GET /sse` sends a client reconnecting with
    `Last-Event-ID` (the `end` event is not a chunk)."""
    response = httpx.get(
        f"{url}/sse",
        params={"session_id": session_id, "run_id": run_id},
        headers={"Last-Event-ID": str(last_event_id)},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    events, seq = [], None
    for line in response.text.splitlines():
        if line.startswith("id: "):
            seq = int(line[4:])
        elif line.startswith("event: ") and seq is not None:
            events.append((seq, line[7:]))
            seq = None
    return events


async def _one_step_of_two_calls(helix: Any, make_agent: Any, mock_llm: Any) -> Any:
    """A run of one step calling `lookup` and `noisy` (whose events make a step row of
    several), then a text reply; its result."""
    agent = make_agent(tools=[lookup, noisy])
    mock_llm.add_responses(
        calls(("l1", "lookup", {"query": "a"}), ("n1", "noisy", {"topic": "b"})),
        {"type": "text", "content": "done"},
        agent=agent.name,
    )
    return await (await helix.execute(agent, "go")).result()


async def test_sse_resumes_after_every_last_event_id_inside_a_step_row(
    helix, make_agent, mock_llm
) -> None:
    result = await _one_step_of_two_calls(helix, make_agent, mock_llm)
    events = [(e[0], e[2]) for e in await stream(helix, result.session_id)]
    assert [t for _, t in events][1:7] == ["tool_start", "tool_end", "tool_start"] + [
        "custom",
        "custom",
        "tool_end",
    ]
    with serve(create_app(helix, allow_unauthenticated=True)) as url:
        for after in range(0, events[-1][0] + 1):
            got = await asyncio.to_thread(sse_events, url, result.session_id, result.run_id, after)
            assert got == [e for e in events if e[0] > after], after


async def test_a_step_writes_7_rows(helix, make_agent, mock_llm, database_url) -> None:
    """Per step of one tool call: DBOS's 2 checkpoints, 2 messages and 1 chunk row
    inserted (the run's and the session's rows are updated), and its checkpoint derived,
    not stored (migration 0030): a run of 6 such steps inserts 4 × 5 rows more than one
    of 2, and lists 4 checkpoints more."""
    agent = make_agent(tools=[lookup])

    async def inserted(steps: int) -> dict[str, int]:
        for i in range(steps):
            mock_llm.add_response(calls((f"c{i}", "lookup", {"query": str(i)})), agent=agent.name)
        mock_llm.add_response({"type": "text", "content": "done"}, agent=agent.name)
        result = await (await helix.execute(agent, f"{steps} steps")).result()
        assert result.status == "completed", result.error
        counts = sql(
            database_url,
            "SELECT (SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = %s), "
            "(SELECT count(*) FROM helix.messages WHERE run_id = %s), "
            "(SELECT count(*) FROM helix.checkpoints WHERE run_id = %s), "
            "(SELECT count(*) FROM helix.stream_chunks WHERE run_id = %s), "
            "(SELECT count(*) FROM ONLY helix.usage_rows WHERE run_id = %s), "
            "(SELECT count(*) FROM helix.stream_events WHERE run_id = %s), "
            "(SELECT count(*) FROM helix.session_checkpoints WHERE run_id = %s)",
            f"helix-{result.run_id}",
            *[result.run_id] * 6,
        )[0]
        names = ("operation_outputs", "messages", "checkpoints", "chunk_rows", "usage_rows")
        return dict(zip((*names, "events", "listed"), counts, strict=True))

    short, long = await inserted(2), await inserted(6)
    per_step = {k: (long[k] - short[k]) / 4 for k in short}
    assert per_step == {
        "operation_outputs": 2,
        "messages": 2,
        "checkpoints": 0,  # was 1, by the trigger: derived (migration 0030)
        "chunk_rows": 1,  # was 2: tool_start and tool_end
        "usage_rows": 0,
        "events": 2,  # what readers get is unchanged
        "listed": 1,  # a checkpoint a step, as before
    }


class Counter(BaseModel):
    hits: int = 0


@tool
def hit(ctx: ToolContext) -> int:
    """Count a hit in the state."""
    hits = ctx.get_state().hits + 1
    ctx.update_state({"hits": hits})
    return hits


def test_a_runs_lifecycle_event_is_a_row_of_its_own_between_the_steps_rows() -> None:
    kinds = ["run_interrupted", "tool_start", "custom", "tool_end", "run_stopped", "x"]
    assert _step_groups(kinds) == [None, 1, 1, 1, None, 2]
    assert _step_groups(["tool_start", "tool_end", "state_patch"]) == [0, 0, 0]


async def test_the_step_that_stops_a_run_keeps_its_end_visible_to_any_reader(
    helix, make_agent, mock_llm, database_url
) -> None:
    """`run_stopped` comes after the step's events: a row of its own after the step's row,
    so a reader of one row per chunk (an older build's) still sees the run stop."""
    agent = make_agent(tools=[hit], state_schema=Counter, stop_when=lambda r, s: s.hits >= 2)
    mock_llm.add_responses(calls(("h1", "hit", {})), calls(("h2", "hit", {})), agent=agent.name)
    result = await (await helix.execute(agent, "go")).result()
    assert result.stop_reason == "stop_when", result.error

    assert step_rows(database_url, result.run_id)[1:] == [
        (1, "state_patch", 2),  # tool_start, tool_end, then the state's patch
        (2, "state_patch", 2),
        (2, "run_stopped", None),
        (2, "output", None),
        (2, "run_completed", None),
    ]
    events = await stream(helix, result.session_id)
    assert [e[2] for e in events] == ["run_started"] + [
        "tool_start",
        "tool_end",
        "state_patch",
    ] * 2 + ["run_stopped", "output", "run_completed"]
    assert view(database_url, result.session_id) == events
    await assert_resumes_anywhere(helix, result.session_id, events)


async def test_a_sub_agents_step_row_is_copied_to_its_root_with_the_roots_seqs(
    helix, make_agent, mock_llm, database_url
) -> None:
    child = make_agent(tools=[lookup, noisy])
    parent = make_agent(tools=[sub_agent_tool(child), lookup])
    name = f"subagent__{child.name}"
    mock_llm.add_responses(
        calls(("s1", name, {"message": "dig"}), ("p1", "lookup", {"query": "p"})),
        {"type": "text", "content": "parent done"},
        agent=parent.name,
    )
    mock_llm.add_responses(
        calls(("k1", "noisy", {"topic": "x"}), ("k2", "lookup", {"query": "y"})),
        {"type": "text", "content": "child done"},
        agent=child.name,
    )
    result = await (await helix.execute(parent, "delegate")).result()
    assert result.status == "completed", result.error
    [(child_session,)] = sql(
        database_url,
        "SELECT session_id FROM helix.sessions WHERE parent_session_id = %s",
        result.session_id,
    )
    root = await stream(helix, result.session_id)
    mine = await stream(helix, child_session)
    copied = [(t, p) for _, s, t, p in root if s == child_session]
    assert copied == [(t, p) for _, _, t, p in mine], "the child's events, each once, in order"
    assert [e[2] for e in mine].count("custom") == 2
    assert sql(
        database_url,
        "SELECT jsonb_array_length(prior_events), chunk_key LIKE '%%@root' FROM "
        "helix.stream_chunks WHERE session_id = %s AND source_session_id = %s "
        "AND prior_events IS NOT NULL",
        result.session_id,
        child_session,
    ) == [(5, True)], "the child's step is one row in the root's stream too"
    keys = sql(
        database_url,
        "SELECT chunk_key FROM helix.stream_events WHERE session_id = %s",
        result.session_id,
    )
    assert len(keys) == len({k for (k,) in keys}) == len(root)
    assert view(database_url, result.session_id) == root
    await assert_resumes_anywhere(helix, result.session_id, root)


async def test_prune_removes_step_rows_and_counts_their_events(
    helix, make_agent, mock_llm, database_url
) -> None:
    result = await _one_step_of_two_calls(helix, make_agent, mock_llm)
    events = len(view(database_url, result.session_id))
    assert events == 10 and len(step_rows(database_url, result.run_id)) == 5
    for table, column in (("helix.stream_chunks", "created_at"), ("helix.runs", "finished_at")):
        sql(
            database_url,
            f"UPDATE {table} SET {column} = {column} - interval '400 days' WHERE session_id = %s",
            result.session_id,
        )
    report = await helix.checkpoints.prune(older_than=timedelta(days=300), keep_last=1)
    assert report.stream_chunks >= events, "events, as readers counted them, not rows"
    assert view(database_url, result.session_id) == []
    assert await stream(helix, result.session_id) == []


@pytest.mark.crash
def test_a_kill_mid_step_leaves_each_event_once(database_url, tmp_path) -> None:
    """Killed in a slow call of a parallel batch: the slow call's `tool_start` was written
    live (a row of its own) and is also among the step's events; after recovery the step's
    row leaves it out, and no event is missing or twice."""
    proc, executor, run_id, session_id = start_run(database_url, "parallel", tmp_path)
    wait_for(lambda: (tmp_path / "in_slow_b").exists())
    live_start = (
        "SELECT count(*) FROM helix.stream_chunks WHERE run_id = %s AND type = 'tool_start' "
        "AND prior_events IS NULL"
    )
    wait_for(lambda: sql(database_url, live_start, run_id) == [(1,)])
    sigkill(proc)
    outcome = relaunch(database_url, executor, "parallel", tmp_path, run_id)
    assert outcome["status"] == "completed", outcome

    events = sql(
        database_url,
        "SELECT seq, chunk_key, type, payload ->> 'tool_call_id' FROM helix.stream_events "
        "WHERE run_id = %s ORDER BY seq",
        run_id,
    )
    assert len({e[0] for e in events}) == len({e[1] for e in events}) == len(events)
    for kind in ("tool_start", "tool_end"):
        ids = sorted(e[3] for e in events if e[2] == kind and e[3].startswith("p"))
        assert ids == ["p0", "p1", "p2", "p3"], (kind, events)
    assert sql(database_url, live_start, run_id) == [(1,)], "p2's, shown live, only"
    assert sql(
        database_url,
        "SELECT count(*) FROM helix.stream_chunks WHERE run_id = %s AND step = 1 "
        "AND prior_events IS NOT NULL",
        run_id,
    ) == [(1,)]

    async def resumed() -> None:
        engine = create_async_engine(sqlalchemy_url(database_url))
        try:
            async with engine.connect() as conn:
                every = [r[0] for r in await repo.load_chunks(conn, session_id)]
                assert every == sorted(set(every))
                for after in range(0, every[-1] + 1):
                    rest = [r[0] for r in await repo.load_chunks(conn, session_id, after_seq=after)]
                    assert rest == [s for s in every if s > after]
        finally:
            await engine.dispose()

    asyncio.run(resumed())


# The last commit before migration 0028: its code writes one row per chunk.
BEFORE = PreviousRelease("59ff1cf732032c21699e54db316e7ca70bfb835d", "before-0028")
APP = Path(__file__).parent / "apps" / "chunk_rows_app.py"


def _app(code: Interpreter, url: str, tmp: Path, *args: str) -> Any:
    """Run tests/apps/chunk_rows_app.py on a build; its one JSON line."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("HELIX_")}
    if code.path is not None:
        env["PYTHONPATH"] = code.path
    tmp.mkdir(exist_ok=True)
    done = forkserver.run(
        [code.python, str(APP), url, *args],
        env=env,
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _rows(url: str, session_id: str) -> list[list[Any]]:
    """The session's rows as a reader of one row per chunk reads them."""
    rows = sql(
        url,
        "SELECT seq, type, payload FROM helix.stream_chunks WHERE session_id = %s ORDER BY seq",
        session_id,
    )
    return [list(r) for r in rows]


@pytest.mark.crash
def test_older_builds_keep_their_rows_and_read_new_ones_degraded(
    empty_database_url: str, tmp_path: Path
) -> None:
    url = empty_database_url
    old = previous_code(BEFORE, tmp_path / "old")
    new = Interpreter(sys.executable, None)
    old_sessions = _app(old, url, tmp_path / "w1", "write")
    assert "0028_step_chunk_rows" not in applied_migrations(url)
    written = {s: _rows(url, s) for s in old_sessions}

    assert apply_migrations(url)[0] == "0028_step_chunk_rows"  # and those after it
    for s in old_sessions:  # rows written before the migration read as they were
        assert _app(new, url, tmp_path / "r1", "read", s) == written[s]
        assert [[e[0], e[2], e[3]] for e in view(url, s)] == written[s]

    # This build writes the same events, at the same seqs, in fewer rows.
    new_sessions = _app(new, url, tmp_path / "w2", "write")
    for s, o in zip(new_sessions, old_sessions, strict=True):
        assert _app(new, url, tmp_path / "r2", "read", s) == written[o]
        assert len(_rows(url, s)) == len(written[o]) - 6, "steps 1 and 2: 6 + 2 events, 2 rows"
    # An older build on the migrated database (a rolling upgrade) writes a row per chunk,
    # its last step's through this migration's `helix.end_step_and_run` too.
    again = _app(old, url, tmp_path / "w3", "write")
    for s, o in zip(again, old_sessions, strict=True):
        assert _rows(url, s) == written[o]
        assert _app(new, url, tmp_path / "r3", "read", s) == written[o]
    # An older build's reader shows each step row as its last event, at its own seq: no
    # error, no duplicate, no seq moved; the events before it in the row it does not show.
    for s in new_sessions:
        shown = _app(old, url, tmp_path / "r4", "read", s)
        assert shown == _rows(url, s)
        assert [e[1] for e in shown][:4] == ["run_started", "tool_end", "tool_end", "text_delta"]
