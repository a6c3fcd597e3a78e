"""Time travel and branching (issue 30): checkpoints per committed step, reading a session
as it was, forking from a checkpoint, and pruning, on the real runtime."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

import forkserver
import pytest
from checkpoint_shadow import shadow_checkpoints  # noqa: F401 - autouse: as the trigger gave
from helpers import calls, sql, wait_for, wait_until_waiting
from pydantic import BaseModel
from test_crash import sigkill
from test_time_travel_cli import workflow_done

from helix_dbos import CheckpointNotFoundError, ToolContext, tool
from helix_dbos.errors import InvalidInputError, SessionNotFoundError
from helix_dbos.runtime.loop import slow_head
from helix_dbos.store.checkpoint_rows import UNANSWERED

FORK_APP = Path(__file__).parent / "apps" / "fork_crash_app.py"


def spawn_app(app: Path, mode: str, database_url: str, *args: object) -> subprocess.Popen:
    markers = Path(str(args[1]))
    stderr = open(markers / f"stderr-{mode}-{time.monotonic_ns()}.log", "w")  # noqa: SIM115
    return forkserver.Popen(
        [sys.executable, str(app), mode, database_url, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )


class Counter(BaseModel):
    count: int = 0
    notes: list[str] = []


@tool
def bump(by: int, ctx: ToolContext) -> int:
    """Add to the counter."""
    ctx.update_state(lambda s: s.model_copy(update={"count": s.count + by}))
    return by


@tool
def look(what: str) -> str:
    """Look at something (the state stays)."""
    return f"saw {what}"


@tool(require_approval=True)
def launch_rocket(target: str) -> str:
    """Launch a rocket (needs approval)."""
    return f"launched at {target}"


@pytest.fixture(autouse=True)
def no_slow_tool_heads(monkeypatch):
    """A step whose tools run past `LIVE_TOOL_START_SECONDS` (0.1 s: any tool on a loaded
    box) has its head written early, and that head is a checkpoint too. These tests count
    checkpoints, so here no tool is ever that slow."""
    monkeypatch.setattr(slow_head, "LIVE_TOOL_START_SECONDS", 60.0)


async def three_step_session(helix, make_agent, mock_llm):
    agent = make_agent(tools=[bump, look], state_schema=Counter)
    mock_llm.add_responses(
        calls(("b1", "bump", {"by": 2})),
        calls(("l1", "look", {"what": "sky"})),
        calls(("b2", "bump", {"by": 3})),
        {"type": "text", "content": "done"},
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "count please")).result()
    assert result.status == "completed"
    return agent, result


async def test_a_checkpoint_per_committed_step_with_state_only_when_it_changed(
    helix, make_agent, mock_llm, database_url
):
    _, result = await three_step_session(helix, make_agent, mock_llm)
    cps = await helix.checkpoints.list(result.session_id)

    assert [(c.kind, c.step, c.run_id) for c in cps] == [
        ("step", i, result.run_id) for i in (1, 2, 3, 4)
    ]
    assert [c.checkpoint_id for c in cps] == [f"{result.run_id}:{i}" for i in (1, 2, 3, 4)]
    # user, (assistant, tool) x 3, assistant: the seq each step's last message has
    assert [c.message_seq for c in cps] == [3, 5, 7, 8]
    assert [c.state["count"] for c in cps] == [2, 2, 5, 5]
    stored = sql(
        database_url,
        "SELECT step, state IS NOT NULL FROM helix.checkpoints WHERE run_id = %s ORDER BY ord",
        result.run_id,
    )
    # Stored (migration 0030): the run's first step, step 3 (it wrote the state) and the
    # last one (the run's end), step 3's and step 1's with their state; step 2 is derived.
    assert stored == [(1, True), (3, True), (4, False)], "state only when changed"
    assert [c.usage.llm_calls for c in cps] == [1, 2, 3, 4]
    assert [c.usage.tool_calls for c in cps] == [1, 2, 3, 3]
    usage = await helix.get_usage(session_id=result.session_id)
    assert cps[-1].usage == usage, "the last checkpoint's usage is the session's"
    assert cps[0].created_at <= cps[-1].created_at

    view = await helix.checkpoints.get(result.session_id, cps[1].checkpoint_id)
    assert [m.role for m in view.messages] == ["user", "assistant", "tool", "assistant", "tool"]
    assert view.messages[-1].content == "saw sky" and view.state["count"] == 2


async def test_a_second_turn_adds_checkpoints_with_usage_counted_on(helix, make_agent, mock_llm):
    agent, first = await three_step_session(helix, make_agent, mock_llm)
    mock_llm.add_responses({"type": "text", "content": "again"}, agent=agent.name)
    second = await (await helix.execute(agent, "more", session_id=first.session_id)).result()
    cps = await helix.checkpoints.list(first.session_id)
    assert [c.run_id for c in cps] == [first.run_id] * 4 + [second.run_id]
    assert cps[-1].message_seq == 10 and cps[-1].usage.llm_calls == 5
    assert cps[-1].state["count"] == 5


async def test_a_wait_has_a_checkpoint_whose_last_message_is_the_pending_call(
    helix, make_agent, mock_llm
):
    agent = make_agent(tools=[launch_rocket])
    mock_llm.add_responses(
        calls(("r1", "launch_rocket", {"target": "moon"})),
        {"type": "text", "content": "launched"},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "go")
    await wait_until_waiting(helix, handle.session_id)
    cps = await helix.checkpoints.list(handle.session_id)
    assert [(c.kind, c.step) for c in cps] == [("head", 1)]
    view = await helix.checkpoints.get(handle.session_id, cps[0].checkpoint_id)
    assert cps[0].checkpoint_id == f"{handle.run_id}:1:head"
    assert view.messages[-1].role == "assistant"
    assert [c.id for c in view.messages[-1].tool_calls or []] == ["r1"]
    assert cps[0].usage.llm_calls == 1

    await helix.approve(handle.session_id, "r1")
    assert (await handle.result()).status == "completed"
    cps = await helix.checkpoints.list(handle.session_id)
    assert [(c.kind, c.step) for c in cps] == [("head", 1), ("step", 1), ("step", 2)]
    assert [c.usage.llm_calls for c in cps] == [1, 1, 2], "a head is not counted twice"


async def test_fork_copies_history_and_state_and_leaves_the_source_alone(
    helix, make_agent, mock_llm, database_url
):
    agent, result = await three_step_session(helix, make_agent, mock_llm)
    cps = await helix.checkpoints.list(result.session_id)
    before = await helix.get_messages(result.session_id)

    fork = await helix.checkpoints.fork(result.session_id, at=cps[1])
    assert fork != result.session_id
    assert await helix.get_messages(result.session_id) == before, "the source is untouched"
    view = await helix.checkpoints.get(result.session_id, cps[1].checkpoint_id)
    assert await helix.get_messages(fork) == view.messages
    session = await helix.get_session(fork)
    assert session.state["count"] == 2 and session.agent_name == agent.name
    assert sql(
        database_url,
        "SELECT forked_from_session_id, forked_from_checkpoint_id FROM helix.sessions "
        "WHERE session_id = %s",
        fork,
    ) == [(result.session_id, cps[1].checkpoint_id)]
    fork_cps = await helix.checkpoints.list(fork)
    assert [(c.kind, c.message_seq, c.run_id) for c in fork_cps] == [("fork", 5, None)]

    # resume: the model is asked again with the history as of the checkpoint
    mock_llm.add_responses(
        calls(("b9", "bump", {"by": 10})),
        {"type": "text", "content": "forked"},
        agent=agent.name,
    )
    resumed = await (await helix.resume(fork)).result()
    assert resumed.status == "completed" and resumed.session_id == fork
    asked = mock_llm.get_last_input().messages
    assert [m.content for m in asked if m.role == "tool"][:2] == ["2", "saw sky"]
    assert (await helix.get_session(fork)).state["count"] == 12
    assert (await helix.get_session(result.session_id)).state["count"] == 5

    # execute with a new message continues it too
    mock_llm.add_responses({"type": "text", "content": "hello again"}, agent=agent.name)
    more = await (await helix.execute(agent, "and now?", session_id=fork)).result()
    assert more.output == "hello again" or more.status == "completed"
    runs = await helix.list_runs(fork)
    assert [(r.turn, r.status) for r in runs] == [(1, "completed"), (2, "completed")]
    assert await helix.get_messages(result.session_id) == before


async def test_fork_with_edited_state_is_validated(helix, make_agent, mock_llm):
    _, result = await three_step_session(helix, make_agent, mock_llm)
    cps = await asyncio.to_thread(helix.checkpoints.list_sync, result.session_id)
    assert cps == await helix.checkpoints.list(result.session_id)
    synced = await asyncio.to_thread(helix.checkpoints.fork_sync, result.session_id, cps[3])
    assert (await helix.get_session(synced)).state["count"] == 5
    fork = await helix.checkpoints.fork(
        result.session_id, at=cps[0].checkpoint_id, state={"count": 99}
    )
    assert (await helix.get_session(fork)).state == {"count": 99, "notes": []}
    assert (await helix.checkpoints.list(fork))[0].state["count"] == 99
    with pytest.raises(Exception, match="count"):
        await helix.checkpoints.fork(result.session_id, at=cps[0], state={"count": "many"})


async def test_a_fork_of_a_fork(helix, make_agent, mock_llm):
    agent, result = await three_step_session(helix, make_agent, mock_llm)
    cps = await helix.checkpoints.list(result.session_id)
    first = await helix.checkpoints.fork(result.session_id, at=cps[2])
    mock_llm.add_responses({"type": "text", "content": "branch one"}, agent=agent.name)
    await (await helix.resume(first)).result()
    first_cps = await helix.checkpoints.list(first)
    assert [c.kind for c in first_cps] == ["fork", "step"]

    # from the fork's root, and from its own step
    at_root = await helix.checkpoints.fork(first, at=first_cps[0])
    at_step = await helix.checkpoints.fork(first, at=first_cps[1].checkpoint_id)
    assert (
        await helix.get_messages(at_root)
        == (await helix.checkpoints.get(result.session_id, cps[2].checkpoint_id)).messages
    )
    assert [m.content for m in await helix.get_messages(at_step)][-1] == "branch one"
    mock_llm.add_responses({"type": "text", "content": "branch two"}, agent=agent.name)
    again = await (await helix.resume(at_step)).result()
    assert again.status == "completed"
    assert (await helix.get_session(at_step)).state["count"] == 5


async def test_fork_of_a_mid_wait_checkpoint_pairs_the_pending_call(
    helix, make_agent, mock_llm, database_url
):
    agent = make_agent(tools=[launch_rocket])
    mock_llm.add_responses(
        calls(("r1", "launch_rocket", {"target": "mars"})),
        {"type": "text", "content": "source done"},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "go")
    await wait_until_waiting(helix, handle.session_id)
    (wait,) = await helix.checkpoints.list(handle.session_id)

    fork = await helix.checkpoints.fork(handle.session_id, at=wait)
    messages = await helix.get_messages(fork)
    assert [m.role for m in messages] == ["user", "assistant", "tool"]
    assert messages[-1].tool_call_id == "r1" and messages[-1].is_error
    assert messages[-1].content == UNANSWERED
    assert (await helix.get_current_run(handle.session_id)).status == "waiting", (
        "the source still waits"
    )
    mock_llm.add_responses({"type": "text", "content": "fork done"}, agent=agent.name)
    resumed = await (await helix.resume(fork)).result()
    assert resumed.status == "completed"
    assert sql(
        database_url, "SELECT count(*) FROM helix.tool_calls WHERE session_id = %s", fork
    ) == [(0,)], "the fork has no wait of its own"

    await helix.approve(handle.session_id, "r1")
    assert (await handle.result()).status == "completed"
    src = await helix.get_messages(handle.session_id)
    assert src[2].content == "launched at mars" and not src[2].is_error


async def test_fork_while_the_source_runs_does_not_disturb_it(helix, make_agent, mock_llm):
    # Thread-safe: the run's tool runs on DBOS's event loop, in another thread. An
    # asyncio.Event set there did not wake this loop, which slept out its 30 s timeout.
    gate = threading.Event()
    entered = threading.Event()

    @tool
    async def slow(n: int) -> int:
        """A slow tool."""
        entered.set()
        assert await asyncio.to_thread(gate.wait, 60)
        return n

    agent = make_agent(tools=[look, slow])
    mock_llm.add_responses(
        calls(("l1", "look", {"what": "a"})),
        calls(("s1", "slow", {"n": 1})),
        {"type": "text", "content": "source finished"},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "go")
    assert await asyncio.to_thread(entered.wait, 30)
    for _ in range(200):
        cps = await helix.checkpoints.list(handle.session_id)
        if any(c.kind == "step" for c in cps):
            break
        await asyncio.sleep(0.05)
    step1 = next(c for c in cps if c.kind == "step")
    fork = await helix.checkpoints.fork(handle.session_id, at=step1)
    assert (await helix.get_current_run(handle.session_id)).status == "running"
    gate.set()
    source = await handle.result()
    assert source.status == "completed" and source.output == "source finished"
    assert [m.content for m in await helix.get_messages(fork)][-1] == "saw a"
    mock_llm.add_responses({"type": "text", "content": "fork finished"}, agent=agent.name)
    forked = await (await helix.resume(fork)).result()
    assert forked.output == "fork finished"


async def test_unknown_and_bad_ids_are_clear_errors(helix, make_agent, mock_llm):
    _, result = await three_step_session(helix, make_agent, mock_llm)
    with pytest.raises(CheckpointNotFoundError, match="nope"):
        await helix.checkpoints.get(result.session_id, "nope")
    with pytest.raises(CheckpointNotFoundError):
        await helix.checkpoints.fork(result.session_id, at="run_x:1")
    other, _ = await three_step_session(helix, make_agent, mock_llm), None
    theirs = (await helix.checkpoints.list(other[1].session_id))[0]
    with pytest.raises(CheckpointNotFoundError):
        await helix.checkpoints.fork(result.session_id, at=theirs.checkpoint_id)
    with pytest.raises(SessionNotFoundError):
        await helix.checkpoints.list("ses_missing")
    with pytest.raises(InvalidInputError):
        await helix.checkpoints.get(result.session_id, "bad\x00id")
    with pytest.raises(InvalidInputError):
        await helix.checkpoints.fork("bad\x00session", at="x")


async def test_sessions_without_checkpoints_read_as_none(helix, make_agent, mock_llm, database_url):
    """A session from before migration 0013 has no checkpoint rows: they are not derived
    (nor are a run's from before migration 0030: `derived_after` is NULL)."""
    _, result = await three_step_session(helix, make_agent, mock_llm)
    sql(database_url, "UPDATE helix.runs SET derived_after = NULL WHERE run_id = %s", result.run_id)
    for table in ("helix.checkpoints", "test_shadow.checkpoints"):
        sql(database_url, f"DELETE FROM {table} WHERE session_id = %s", result.session_id)
    assert await helix.checkpoints.list(result.session_id) == []
    assert len(await helix.get_messages(result.session_id)) == 8


async def test_prune_removes_old_rows_of_ended_runs_and_keeps_the_last_k(
    helix, make_agent, mock_llm, database_url, monkeypatch
):
    agent, old = await three_step_session(helix, make_agent, mock_llm)
    # age the session's rows by a day (a derived checkpoint's time is its last message's)
    for table, column in (
        ("helix.checkpoints", "created_at"),
        ("test_shadow.checkpoints", "created_at"),
        ("helix.messages", "created_at"),
        ("helix.stream_chunks", "created_at"),
        ("helix.runs", "finished_at"),
    ):
        sql(
            database_url,
            f"UPDATE {table} SET {column} = {column} - interval '2 days' WHERE session_id = %s",
            old.session_id,
        )
    # a live run in another session, with rows just as old; its holding step writes its
    # head (which `no_slow_tool_heads` puts off for the counts above): else the wait below
    # for step 2's head ran out its 10 s and the live session had no head to keep
    monkeypatch.setattr(slow_head, "LIVE_TOOL_START_SECONDS", 0.1)
    gate = threading.Event()  # set from this thread, waited for on DBOS's loop

    @tool
    async def hold(n: int) -> int:
        """Hold until released."""
        assert await asyncio.to_thread(gate.wait, 60)
        return n

    live_agent = make_agent(tools=[look, hold])
    mock_llm.add_responses(
        calls(("l1", "look", {"what": "x"})),
        calls(("h1", "hold", {"n": 1})),
        {"type": "text", "content": "live done"},
        agent=live_agent.name,
    )
    live = await helix.execute(live_agent, "stay")
    for _ in range(200):
        kinds = [c.kind for c in await helix.checkpoints.list(live.session_id)]
        if kinds == ["step", "head"]:  # step 1, and step 2's head (its tool holds)
            break
        await asyncio.sleep(0.05)
    # and the held call's live `tool_start`, written apart from the head (the counts below
    # would otherwise see it land after they were taken: CI saw 2 chunks, then 3)
    for _ in range(200):
        started = sql(
            database_url,
            "SELECT count(*) FROM helix.stream_chunks WHERE session_id = %s "
            "AND type = 'tool_start' AND payload ->> 'tool_name' = 'hold'",
            live.session_id,
        )
        if started == [(1,)]:
            break
        await asyncio.sleep(0.05)
    assert started == [(1,)], "the held call's tool_start was written"
    for table in ("helix.checkpoints", "test_shadow.checkpoints", "helix.messages"):
        sql(
            database_url,
            f"UPDATE {table} SET created_at = created_at - interval '2 days' WHERE session_id = %s",
            live.session_id,
        )
    live_before = sql(
        database_url,
        "SELECT (SELECT count(*) FROM helix.checkpoints WHERE session_id = %s), "
        "(SELECT count(*) FROM helix.stream_chunks WHERE session_id = %s)",
        live.session_id,
        live.session_id,
    )
    messages = await helix.get_messages(old.session_id)
    await workflow_done(database_url, f"helix-{old.run_id}")

    report = await helix.checkpoints.prune(older_than=timedelta(days=1), keep_last=1)

    assert report.checkpoints >= 3 and report.stream_chunks > 0 and report.workflows >= 1
    kept = await helix.checkpoints.list(old.session_id)
    assert [c.step for c in kept] == [4] and kept[0].state["count"] == 5, (
        "the last checkpoint stays, with the state it pointed at (copied in)"
    )
    assert sql(
        database_url,
        "SELECT count(*) FROM helix.stream_chunks WHERE session_id = %s",
        old.session_id,
    ) == [(0,)]
    assert sql(
        database_url,
        "SELECT count(*) FROM dbos.workflow_status WHERE workflow_uuid = %s",
        f"helix-{old.run_id}",
    ) == [(0,)]
    assert await helix.get_messages(old.session_id) == messages, "the transcript stays"
    assert (await helix.get_run(old.run_id)).status == "completed"
    again = await (await helix.get_handle(old.run_id)).result()
    assert (again.status, again.output) == ("completed", "done"), (
        "a pruned run's result still reads from its row"
    )
    assert (
        sql(
            database_url,
            "SELECT (SELECT count(*) FROM helix.checkpoints WHERE session_id = %s), "
            "(SELECT count(*) FROM helix.stream_chunks WHERE session_id = %s)",
            live.session_id,
            live.session_id,
        )
        == live_before
    ), "a session with a live run is not touched"
    gate.set()
    assert (await live.result()).output == "live done"
    with pytest.raises(InvalidInputError):
        await helix.checkpoints.prune(older_than=timedelta(days=-1))


@pytest.mark.crash
def test_sigkill_during_a_forks_first_run_recovers_and_completes_once(database_url, tmp_path):
    """The fork's first run (opened by `resume`, like any run) is killed in a tool call;
    the relaunched process recovers it and completes it once."""
    executor = f"fork-crash-{uuid.uuid4().hex[:8]}"
    proc = spawn_app(FORK_APP, "start", database_url, executor, tmp_path)
    assert proc.stdout is not None
    started = json.loads(proc.stdout.readline())
    wait_for(lambda: (tmp_path / "in_slow").exists())
    sigkill(proc)
    assert started["output"] == "main done after 1 steps"

    again = spawn_app(FORK_APP, "recover", database_url, executor, tmp_path, started["run_id"])
    out, _ = again.communicate(timeout=120)
    assert again.returncode == 0, out
    outcome = json.loads(out.strip().splitlines()[-1])

    assert outcome == {"status": "completed", "output": "fork done after 2 steps", "error": None}
    marks = (tmp_path / "record.log").read_text().splitlines()
    assert marks == ["one"], "the fork does not run the source's tool again"
    assert (tmp_path / "slow.log").read_text().splitlines() == ["two", "two"]
    llm = (tmp_path / "llm.log").read_text().splitlines()
    assert [line.split()[0] for line in llm] == ["main", "main", "fork", "fork"], (
        "each model call once: the fork's second call comes after the recovery"
    )
    fork_rows = sql(
        database_url,
        "SELECT seq, role, tool_call_id FROM helix.messages WHERE session_id = %s ORDER BY seq",
        started["fork"],
    )
    assert [r[1] for r in fork_rows] == [
        "user", "assistant", "tool", "assistant", "tool", "assistant"
    ]  # fmt: skip
    assert [r[0] for r in fork_rows] == list(range(1, 7))
    assert sql(
        database_url,
        "SELECT count(*), count(DISTINCT step) FROM helix.session_checkpoints "
        "WHERE run_id = %s AND kind = 'step'",
        started["run_id"],
    ) == [(2, 2)], "one checkpoint per step of the recovered run"
    assert sql(
        database_url, "SELECT count(*) FROM helix.messages WHERE session_id = %s", started["source"]
    ) == [(4,)], "the source is untouched"
