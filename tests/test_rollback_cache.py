"""A rollback removes messages a process may hold in its cached transcript (issue 48's
history cache): a run's first read counts the session's rolled-back runs and reads the
transcript whole when that count moved, so no model is shown a rolled-back message.

Not beside the other double-texting tests: their checkpoint shadow (migration 0013's
trigger) stored the interrupting run's checkpoint with the aborted run's usage in it,
before the rollback removed that usage; the derived checkpoints (migration 0030) sum the
visible usage, without it, as `helix.usage` does. The last test here pins that."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import forkserver
from helpers import sql

pytest_plugins = ["double_texting_support"]  # the gate and the scripted model
APP = Path(__file__).parent / "apps" / "rollback_elsewhere_app.py"


def last_user_of(request) -> str:
    return next(m.content or "" for m in reversed(request.messages) if m.role == "user")


async def interrupt_then_roll_back(helix, agent, gate) -> tuple[str, str, str]:
    """A run that bumps the state and holds at the gate; an `interrupt` message, then a
    `rollback` one to it. Returns the session and the two messages' run ids, all ended."""
    first = await helix.execute(agent, "bump then hold")
    await gate.wait_entered()
    sid = first.session_id
    between = await helix.execute(
        agent, "in between", session_id=sid, multitask_strategy="interrupt"
    )
    over = await helix.execute(agent, "start over", session_id=sid, multitask_strategy="rollback")
    gate.release.set()
    r1, r2, r3 = await first.result(), await between.result(), await over.result()
    assert (r1.status, r2.output, r3.output) == ("aborted", "re: in between", "re: start over")
    return sid, between.run_id, over.run_id


async def test_a_rollback_after_an_interrupting_run_leaves_nothing_in_the_cached_transcript(
    helix, make_agent, scripted, gate, database_url
):
    """An `interrupt` message, then a `rollback` one, sent to the same live run: the
    interrupting run starts first and reads the live run's messages (this process caches
    them); the rolling-back run then removes them from the middle of that transcript, and
    its model must not see them (it did, from the cache, before the first read counted
    the session's rolled-back runs)."""
    agent = make_agent(tools=[gate.tool, gate.bump])
    sid, _, _ = await interrupt_then_roll_back(helix, agent, gate)
    sent = {
        last_user_of(r): [(m.role, m.content) for m in r.messages if m.role != "system"]
        for r in scripted.inputs
        if r.agent_name == agent.name
    }
    # The interrupting run saw the aborted run's messages (not yet rolled back) ...
    assert ("user", "bump then hold") in sent["in between"]
    # ... the rolling-back run sees only what the session's visible history holds.
    stored = [(m.role, m.content) for m in await helix.get_messages(sid)]
    assert sent["start over"] == stored[:-1]
    assert sent["start over"] == [
        ("user", "in between"),
        ("assistant", "re: in between"),
        ("user", "start over"),
    ]
    # A later run in this process reads on from the cache (the count has not moved).
    again = await (await helix.execute(agent, "and again", session_id=sid)).result()
    assert again.output == "re: and again"
    last = [r for r in scripted.inputs if r.agent_name == agent.name][-1]
    assert [(m.role, m.content) for m in last.messages if m.role != "system"] == stored + [
        ("user", "and again")
    ]


async def test_a_rollback_sent_from_another_process_reaches_this_ones_cache(
    helix, make_agent, scripted, gate, database_url
):
    """The `rollback` message comes from another process of the fleet (a real one),
    while this process runs the live run and holds its messages in its cache. Whichever
    process runs the message's run, and this process's next run, no model sees the
    rolled-back messages."""
    agent = make_agent(tools=[gate.tool, gate.bump])
    warm = await (await helix.execute(agent, "warm up")).result()
    sid = warm.session_id
    first = await helix.execute(agent, "bump then hold", session_id=sid)
    await gate.wait_entered()
    assert sid in helix.runtime.history._entries  # what a next run here reads on from
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELIX_")}
    other = forkserver.Popen(
        [sys.executable, str(APP), database_url, agent.name, sid, "start over"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert other.stdout is not None
        stored = await asyncio.to_thread(other.stdout.readline)
        assert json.loads(stored or "{}") == {"stored": True}, other.stderr
        gate.release.set()  # the aborted run's workflow ends at its next step
        assert (await first.result()).status == "aborted"
        out, err = await asyncio.to_thread(other.communicate, timeout=120)
    finally:
        if other.poll() is None:
            other.kill()
    assert other.returncode == 0, err
    ended = json.loads(out.splitlines()[-1])
    assert (ended["status"], ended["output"]) == ("completed", "re: start over")
    again = await (await helix.execute(agent, "what now?", session_id=sid)).result()
    assert again.output == "re: what now?"
    here = [
        [m.content for m in r.messages if m.role == "user"]
        for r in scripted.inputs
        if r.agent_name == agent.name
    ]
    for users in here[2:] + ended["seen"]:  # every model call after the rollback's store
        if users[-1] in ("start over", "what now?"):
            assert "bump then hold" not in users, (here, ended["seen"])
    assert here[-1] == ["warm up", "start over", "what now?"]
    stored_users = [m.content for m in await helix.get_messages(sid) if m.role == "user"]
    assert stored_users == ["warm up", "start over", "what now?"]


async def test_the_interrupting_runs_checkpoint_counts_only_visible_usage(
    helix, make_agent, scripted, gate, database_url
):
    """Time travel's checkpoints after such a rollback: each one's usage is the session's
    visible usage through it, so the interrupting run's checkpoint no longer counts the
    rolled-back run's model calls (migration 0013's stored rows did)."""
    agent = make_agent(tools=[gate.tool, gate.bump])
    sid, between, over = await interrupt_then_roll_back(helix, agent, gate)
    listed = sql(
        database_url,
        "SELECT run_id, llm_calls, tool_calls FROM helix.session_checkpoints "
        "WHERE session_id = %s ORDER BY ord",
        sid,
    )
    assert [r[0] for r in listed] == [between, over]
    assert [(r[1], r[2]) for r in listed] == [(1, 0), (2, 0)]
    usage = await helix.get_usage(session_id=sid)
    assert (usage.llm_calls, usage.tool_calls) == (2, 0)
