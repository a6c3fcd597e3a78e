"""Double texting (issue 31): each `multitask_strategy` over the Python API, ordering
under concurrent sends, cancelling, and bad input, on the real runtime."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import forkserver
import pytest
from checkpoint_shadow import shadow_checkpoints  # noqa: F401 - autouse: as the trigger gave
from helpers import sql

from helix_dbos import AgentAlreadyRunningError, HelixDBOS
from helix_dbos.errors import InvalidInputError, QueuedMessageTakenError
from helix_dbos.runtime.sessions.session_queue import QueuedRunHandle
from tests.docs_text import code_blocks, section

pytest_plugins = ["double_texting_support"]  # the gate and the scripted model


def user_messages_of_runs(database_url: str, session_id: str) -> list[tuple[int, str]]:
    return sql(
        database_url,
        "SELECT r.turn, m.content FROM helix.messages m JOIN helix.runs r USING (run_id) "
        "WHERE m.session_id = %s AND m.role = 'user' ORDER BY m.seq",
        session_id,
    )


async def test_reject_is_the_default_and_stores_nothing(
    helix, make_agent, scripted, gate, database_url
):
    agent = make_agent(tools=[gate.tool])
    first = await helix.execute(agent, "hold")
    await gate.wait_entered()
    with pytest.raises(AgentAlreadyRunningError):
        await helix.execute(agent, "again", session_id=first.session_id)
    with pytest.raises(AgentAlreadyRunningError):
        await helix.execute(
            agent, "again", session_id=first.session_id, multitask_strategy="reject"
        )
    gate.release.set()
    assert (await first.result()).status == "completed"
    rows = sql(
        database_url,
        "SELECT count(*) FROM helix.queued_messages WHERE session_id = %s",
        first.session_id,
    )
    assert rows == [(0,)]


async def test_enqueue_runs_each_message_next_in_order(
    helix, make_agent, scripted, gate, database_url
):
    agent = make_agent(tools=[gate.tool])
    first = await helix.execute(agent, "hold")
    await gate.wait_entered()
    sid = first.session_id
    second = await helix.execute(agent, "two", session_id=sid, multitask_strategy="enqueue")
    third = await helix.execute(agent, "three", session_id=sid, multitask_strategy="enqueue")
    assert isinstance(second, QueuedRunHandle) and isinstance(third, QueuedRunHandle)

    waiting = sql(
        database_url,
        "SELECT content, status, strategy, target_run_id FROM helix.queued_messages "
        "WHERE session_id = %s ORDER BY seq",
        sid,
    )
    assert waiting == [
        ("two", "queued", "enqueue", first.run_id),
        ("three", "queued", "enqueue", first.run_id),
    ]
    listed = await helix.queued_messages(sid)
    assert [(m.content, m.position) for m in listed] == [("two", 1), ("three", 2)]
    in_sql = sql(
        database_url,
        "SELECT content, position FROM helix.queued_positions WHERE session_id = %s ORDER BY position",
        sid,
    )
    assert in_sql == [("two", 1), ("three", 2)]
    assert (await helix.get_current_run(sid)).run_id == first.run_id  # not disturbed

    gate.release.set()
    results = [await h.result() for h in (first, second, third)]
    assert [r.status for r in results] == ["completed"] * 3
    assert [r.output for r in results[1:]] == ["re: two", "re: three"]
    assert user_messages_of_runs(database_url, sid) == [(1, "hold"), (2, "two"), (3, "three")]
    started = sql(
        database_url,
        "SELECT q.content, r.turn FROM helix.queued_messages q JOIN helix.runs r "
        "ON r.run_id = q.run_id WHERE q.session_id = %s AND q.status = 'started' ORDER BY q.seq",
        sid,
    )
    assert started == [("two", 2), ("three", 3)]
    chunks = sql(
        database_url,
        "SELECT run_id, payload->>'content' FROM helix.stream_chunks WHERE session_id = %s "
        "AND type = 'message_queued' ORDER BY seq",
        sid,
    )
    assert chunks == [(first.run_id, "two"), (first.run_id, "three")]


async def test_enqueue_on_an_idle_session_starts_at_once(helix, make_agent, scripted):
    agent = make_agent(multitask_strategy="enqueue")
    first = await (await helix.execute(agent, "one")).result()
    handle = await helix.execute(agent, "two", session_id=first.session_id)
    assert not isinstance(handle, QueuedRunHandle)
    assert (await handle.result()).output == "re: two"


async def test_concurrent_enqueues_make_one_run_each_in_storage_order(
    helix, make_agent, scripted, gate, database_url
):
    agent = make_agent(tools=[gate.tool])
    first = await helix.execute(agent, "hold")
    await gate.wait_entered()
    sid = first.session_id
    texts = [f"m{i}" for i in range(8)]
    handles = await asyncio.gather(
        *(helix.execute(agent, t, session_id=sid, multitask_strategy="enqueue") for t in texts)
    )
    gate.release.set()
    results = await asyncio.gather(*(h.result() for h in handles))
    assert sorted(r.output for r in results) == sorted(f"re: {t}" for t in texts)
    assert len({r.run_id for r in results}) == 8
    stored = [
        c
        for (c,) in sql(
            database_url,
            "SELECT content FROM helix.queued_messages WHERE session_id = %s ORDER BY seq",
            sid,
        )
    ]
    assert sorted(stored) == sorted(texts)
    runs = user_messages_of_runs(database_url, sid)
    assert runs == [(1, "hold")] + [(i + 2, t) for i, t in enumerate(stored)]
    assert [r.status for r in await helix.list_runs(sid)] == ["completed"] * 9


async def test_a_queued_message_can_be_cancelled_before_it_starts(
    helix, make_agent, scripted, gate, database_url
):
    agent = make_agent(tools=[gate.tool])
    first = await helix.execute(agent, "hold")
    await gate.wait_entered()
    sid = first.session_id
    dropped = await helix.execute(agent, "drop me", session_id=sid, multitask_strategy="enqueue")
    kept = await helix.execute(agent, "keep me", session_id=sid, multitask_strategy="enqueue")
    assert isinstance(dropped, QueuedRunHandle)
    cancelled = await helix.cancel_queued(sid, dropped.message_id)
    assert cancelled.status == "cancelled" and cancelled.position is None
    gate.release.set()
    assert (await dropped.result()).status == "aborted"
    assert (await kept.result()).output == "re: keep me"
    assert user_messages_of_runs(database_url, sid) == [(1, "hold"), (2, "keep me")]
    assert isinstance(kept, QueuedRunHandle)
    with pytest.raises(QueuedMessageTakenError, match="started"):
        await helix.cancel_queued(sid, kept.message_id)


async def test_interrupt_stops_the_live_run_and_keeps_its_messages(
    helix, make_agent, scripted, gate, database_url
):
    agent = make_agent(tools=[gate.tool])
    first = await helix.execute(agent, "hold")
    await gate.wait_entered()
    sid = first.session_id
    second = await helix.execute(agent, "instead", session_id=sid, multitask_strategy="interrupt")
    gate.release.set()  # the gate's step ends; the interrupt stops the run at the boundary
    r1, r2 = await first.result(), await second.result()
    assert r1.status == "interrupted" and r2.status == "completed" and r2.output == "re: instead"
    messages = await helix.get_messages(sid)
    assert [m.content for m in messages if m.role == "user"] == ["hold", "instead"]
    assert any(m.role == "tool" and m.content and "opened" in m.content for m in messages)
    kinds = sql(
        database_url,
        "SELECT type FROM helix.stream_chunks WHERE session_id = %s AND run_id = %s "
        "AND type IN ('run_interrupted_by_message', 'run_interrupted') ORDER BY seq",
        sid,
        first.run_id,
    )
    assert kinds == [("run_interrupted_by_message",), ("run_interrupted",)]


async def test_rollback_removes_the_live_run_from_the_visible_history(
    helix, make_agent, scripted, gate, database_url
):
    agent = make_agent(tools=[gate.tool, gate.bump])
    warm = await (await helix.execute(agent, "warm up")).result()
    sid = warm.session_id
    before = await helix.get_usage(session_id=sid)
    first = await helix.execute(agent, "bump then hold", session_id=sid)
    await gate.wait_entered()
    assert (await helix.get_session(sid)).state == {"n": 1}
    second = await helix.execute(agent, "start over", session_id=sid, multitask_strategy="rollback")
    r1, r2 = await first.result(), await second.result()
    gate.release.set()
    assert r1.status == "aborted" and r2.output == "re: start over"
    messages = await helix.get_messages(sid)
    assert [m.content for m in messages if m.role == "user"] == ["warm up", "start over"]
    assert all(m.tool_name not in ("bump", "gate") for m in messages)
    assert (await helix.get_session(sid)).state == {}
    after = await helix.get_usage(session_id=sid)
    assert after.llm_calls == before.llm_calls + 1, (before, after)
    audit = sql(
        database_url,
        "SELECT count(*) FILTER (WHERE role = 'user'), min(rolled_back_by) FROM "
        "helix.rolled_back_messages WHERE run_id = %s",
        first.run_id,
    )
    assert audit[0][0] == 1 and audit[0][1] is not None
    assert sql(
        database_url,
        "SELECT count(*) > 0 FROM helix.rolled_back_usage WHERE run_id = %s",
        first.run_id,
    ) == [(True,)]
    checkpoints = sql(
        database_url,
        "SELECT (SELECT count(*) FROM helix.checkpoints WHERE run_id = %s), "
        "(SELECT count(*) FROM helix.session_checkpoints WHERE run_id = %s)",
        first.run_id,
        first.run_id,
    )
    assert checkpoints == [(0, 0)], "the rolled-back run leaves the timeline too"
    last = sql(
        database_url,
        "SELECT llm_calls, state FROM helix.session_checkpoints WHERE session_id = %s "
        "ORDER BY ord DESC LIMIT 1",
        sid,
    )
    assert last == [(after.llm_calls, {})]
    marked = sql(
        database_url,
        "SELECT status, rolled_back_at IS NOT NULL FROM helix.runs WHERE run_id = %s",
        first.run_id,
    )
    assert marked == [("aborted", True)]
    chunk = sql(
        database_url,
        "SELECT payload->>'message_id' FROM helix.stream_chunks WHERE run_id = %s AND type = 'run_rolled_back'",
        first.run_id,
    )
    assert chunk == [(audit[0][1],)]


async def test_steer_joins_the_live_run_before_its_next_model_call(
    helix, make_agent, scripted, gate, database_url
):
    agent = make_agent(tools=[gate.tool])
    first = await helix.execute(agent, "hold")
    await gate.wait_entered()
    sid = first.session_id
    a = await helix.execute(agent, "also A", session_id=sid, multitask_strategy="steer")
    b = await helix.execute(agent, "and B", session_id=sid, multitask_strategy="steer")
    gate.release.set()
    r1, ra, rb = await first.result(), await a.result(), await b.result()
    assert r1.status == "completed" and r1.output == "re: and B"
    assert ra.run_id == rb.run_id == r1.run_id  # no run of their own
    assert len(await helix.list_runs(sid)) == 1
    inputs = [
        [m.content for m in req.messages] for req in scripted.inputs if req.agent_name == agent.name
    ]
    taking = [i for i, contents in enumerate(inputs) if "also A" in contents]
    assert taking and taking[0] == 1, "taken by the model call right after the tool step"
    for contents in inputs:
        assert contents.count("also A") <= 1 and contents.count("and B") <= 1
    transcript = [m.content for m in await helix.get_messages(sid)]
    assert transcript.count("also A") == 1 and transcript.count("and B") == 1
    assert transcript.index("also A") > transcript.index("opened")
    rows = sql(
        database_url,
        "SELECT content, status, run_id, step FROM helix.queued_messages WHERE session_id = %s ORDER BY seq",
        sid,
    )
    assert rows == [("also A", "steered", r1.run_id, 2), ("and B", "steered", r1.run_id, 2)]
    chunks = sql(
        database_url,
        "SELECT count(*) FROM helix.stream_chunks WHERE session_id = %s AND type = 'message_steered'",
        sid,
    )
    assert chunks == [(2,)]


async def test_a_steer_message_the_run_did_not_take_runs_next(
    helix, make_agent, scripted, gate, database_url
):
    agent = make_agent(tools=[gate.tool])
    first = await helix.execute(agent, "hold")
    await gate.wait_entered()
    sid = first.session_id
    late = await helix.execute(agent, "late", session_id=sid, multitask_strategy="steer")
    await helix.interrupt(sid)  # the run ends at its next boundary, before taking it
    gate.release.set()
    assert (await first.result()).status == "interrupted"
    result = await late.result()
    assert result.run_id != first.run_id and result.output == "re: late"


async def test_bad_input_is_refused_before_anything_is_stored(
    helix, make_agent, scripted, gate, database_url
):
    agent = make_agent(tools=[gate.tool])
    first = await helix.execute(agent, "hold")
    await gate.wait_entered()
    sid = first.session_id
    with pytest.raises(InvalidInputError):
        await helix.execute(agent, "nul\x00byte", session_id=sid, multitask_strategy="enqueue")
    with pytest.raises(ValueError, match="multitask_strategy"):
        await helix.execute(agent, "x", session_id=sid, multitask_strategy="sideways")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="multitask_strategy"):
        make_agent(multitask_strategy="sideways")
    gate.release.set()
    await first.result()
    assert sql(
        database_url, "SELECT count(*) FROM helix.queued_messages WHERE session_id = %s", sid
    ) == [(0,)]


async def test_sync_twins(helix: HelixDBOS, make_agent, scripted):
    agent = make_agent()
    result = await (await helix.execute(agent, "one")).result()
    listed = await asyncio.to_thread(helix.queued_messages_sync, result.session_id)
    assert listed == []


async def test_the_cli_lists_a_sessions_queue_and_cancels_a_message(
    helix, make_agent, scripted, gate, database_url
):
    from test_cli import helix_dbos  # noqa: PLC0415 - the CLI runner of the CLI tests

    agent = make_agent(tools=[gate.tool])
    first = await helix.execute(agent, "hold")
    await gate.wait_entered()
    sid = first.session_id
    one = await helix.execute(agent, "first queued", session_id=sid, multitask_strategy="enqueue")
    two = await helix.execute(agent, "second queued", session_id=sid, multitask_strategy="enqueue")
    assert isinstance(one, QueuedRunHandle) and isinstance(two, QueuedRunHandle)
    listed = await helix_dbos(database_url, "queue", sid, "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [(r["content"], r["position"], r["status"]) for r in rows] == [
        ("first queued", 1, "queued"),
        ("second queued", 2, "queued"),
    ]
    table = await helix_dbos(database_url, "queue", sid)
    assert "first queued" in table.stdout and "enqueue" in table.stdout
    cancel = await helix_dbos(database_url, "queue", sid, "--cancel", one.message_id)
    assert cancel.returncode == 0 and "Cancelled" in cancel.stdout, cancel.stderr
    gate.release.set()
    assert (await two.result()).output == "re: second queued"
    late = await helix_dbos(database_url, "queue", sid, "--cancel", two.message_id)
    assert late.returncode == 2 and "started" in late.stderr
    assert (await one.result()).status == "aborted"


def test_the_worked_chat_example_runs_as_pasted(database_url, tmp_path):
    """docs/double-texting.md's concierge, as pasted: its printed lines are the page's,
    and its SQL recipe shows which message started which run."""
    page = section("Double texting")
    script, expected = code_blocks(page, "python")[0], code_blocks(page, "text")[0]
    path = tmp_path / "concierge.py"
    path.write_text(script)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELIX_")}
    done = forkserver.run(
        [sys.executable, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "HELIX_DATABASE_URL": database_url},
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    session, *printed = done.stdout.splitlines()
    assert printed == expected.splitlines()
    [recipe] = code_blocks(page, "sql")
    rows = sql(database_url, recipe.replace("'ses_...'", "%s"), session)
    assert [(r[1], r[2], r[3], r[4], r[5]) for r in rows] == [
        ("steer", "steered", "Vegetarian, please", 1, "completed"),
        ("enqueue", "started", "And a taxi at 8", 2, "completed"),
    ]


async def test_the_sql_positions_follow_the_pure_order(
    helix, make_agent, scripted, gate, database_url
):
    agent = make_agent(tools=[gate.tool])
    first = await helix.execute(agent, "hold")
    await gate.wait_entered()
    sid = first.session_id
    # stored directly, so nothing acts on the run: only the order is under test
    rows = [
        ("a", "enqueue"),
        ("b", "steer"),
        ("c", "interrupt"),
        ("d", "enqueue"),
        ("e", "rollback"),
    ]
    for content, strategy in rows:
        sql(
            database_url,
            "INSERT INTO helix.queued_messages (message_id, session_id, agent_name, strategy, "
            "content) VALUES (%s, %s, %s, %s, %s)",
            f"msg_{sid}_{content}",
            sid,
            agent.name,
            strategy,
            content,
        )
    in_sql = sql(
        database_url,
        "SELECT content FROM helix.queued_positions WHERE session_id = %s ORDER BY position",
        sid,
    )
    pure = [m.content for m in sorted(await helix.queued_messages(sid), key=lambda m: m.position)]
    assert [c for (c,) in in_sql] == pure == ["c", "e", "a", "b", "d"]
    for content, _ in rows:
        await helix.cancel_queued(sid, f"msg_{sid}_{content}")
    gate.release.set()
    assert (await first.result()).status == "completed"
