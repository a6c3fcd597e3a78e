"""Derived step checkpoints (issue 48, cut 4; migration 0030): a step stores no checkpoint
row in the common case, and `helix.session_checkpoints` (with everything that reads it:
list, get, fork, prune) lists what the trigger of migration 0013 gave: the same ids, in
the same order, with the same message_seq, state, usage and time.

Every test here (and in test_time_travel, test_double_texting, test_hitl,
test_context_compaction, test_subagent_usage) ends with `checkpoint_shadow`'s comparison
against that trigger itself, run beside this build's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import forkserver
import pytest
from checkpoint_shadow import (
    compare,
    install,
    shadow_checkpoints,  # noqa: F401 - autouse: as the trigger gave
)
from helpers import calls, sql, wait_for, wait_until_waiting
from pydantic import BaseModel
from release_code import Interpreter, PreviousRelease, previous_code
from test_crash import sigkill

from helix_dbos import CheckpointNotFoundError, ToolContext, sub_agent_tool, tool
from helix_dbos.runtime.loop import slow_head
from helix_dbos.store.migrations import applied_migrations, apply_migrations


class Counter(BaseModel):
    count: int = 0


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
def launch(target: str) -> str:
    """Launch (needs approval)."""
    return f"launched at {target}"


@pytest.fixture(autouse=True)
def no_slow_tool_heads(monkeypatch: pytest.MonkeyPatch) -> None:
    """No head is written early for a slow tool: the tests name every head."""
    monkeypatch.setattr(slow_head, "LIVE_TOOL_START_SECONDS", 60.0)


def usage(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {"model": "mock", "input_tokens": input_tokens, "output_tokens": output_tokens}


def stored(database_url: str, session_id: str) -> list[tuple[Any, ...]]:
    return sql(
        database_url,
        "SELECT run_id, step, kind FROM helix.checkpoints WHERE session_id = %s ORDER BY ord",
        session_id,
    )


async def test_a_session_of_runs_waits_and_children_lists_what_the_trigger_gave(
    helix, make_agent, mock_llm, database_url
):
    child = make_agent()
    agent = make_agent(
        tools=[bump, look, launch, sub_agent_tool(child, name="helper")], state_schema=Counter
    )
    mock_llm.add_responses(
        calls(("b1", "bump", {"by": 2}), usage=usage(10, 5)),
        calls(("l1", "look", {"what": "sky"}), usage=usage(11, 6)),
        calls(("h1", "subagent__helper", {"message": "help"}), usage=usage(12, 7)),
        calls(("l2", "look", {"what": "sea"})),
        {"type": "text", "content": "done", "usage": usage(13, 8)},
        agent=agent.name,
    )
    mock_llm.add_responses(
        {"type": "text", "content": "helped", "usage": usage(100, 50)}, agent=child.name
    )
    first = await (await helix.execute(agent, "go")).result()
    assert first.status == "completed", first.error
    sid = first.session_id
    mock_llm.add_responses(
        calls(("r1", "launch", {"target": "moon"}), usage=usage(14, 9)),
        calls(("b2", "bump", {"by": 3})),
        calls(("l3", "look", {"what": "moon"})),
        {"type": "text", "content": "launched"},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "launch", session_id=sid)
    await wait_until_waiting(helix, sid)
    await helix.approve(sid, "r1")
    second = await handle.result()
    assert second.status == "completed", second.error

    cps = await helix.checkpoints.list(sid)
    a, b = first.run_id, second.run_id
    assert [c.checkpoint_id for c in cps] == [
        *(f"{a}:{i}" for i in range(1, 6)),
        f"{b}:1:head",
        *(f"{b}:{i}" for i in range(1, 5)),
    ]
    # Stored: each run's first write (run b's is its head), the steps that wrote the state
    # (a:1, b:2), the runs' last steps; derived: a:2-4 (the sub-agent's step among them),
    # b:1 (after its head), b:3.
    assert stored(database_url, sid) == [
        (a, 1, "step"),
        (a, 5, "step"),
        (b, 1, "head"),
        (b, 2, "step"),
        (b, 4, "step"),
    ]
    assert [c.state["count"] for c in cps] == [2, 2, 2, 2, 2, 2, 2, 5, 5, 5]
    assert [c.message_seq for c in cps] == [3, 5, 7, 9, 10, 12, 13, 15, 17, 18]
    assert cps[-1].usage == await helix.get_usage(session_id=sid), "the session's usage"
    assert cps[2].usage.subagent_calls == 1 and cps[2].usage.input_tokens == 10 + 11 + 12
    assert [c.usage.llm_calls for c in cps] == [1, 2, 3, 4, 5, 6, 6, 7, 8, 9]

    # A fork from a derived checkpoint: its history and state as they were.
    at = cps[2]
    view = await helix.checkpoints.get(sid, at.checkpoint_id)
    assert [m.role for m in view.messages][-2:] == ["assistant", "tool"]
    fork = await helix.checkpoints.fork(sid, at=at)
    fork_cps = await helix.checkpoints.list(fork)
    assert [(c.kind, c.message_seq, c.state["count"]) for c in fork_cps] == [("fork", 7, 2)]
    assert (await helix.checkpoints.get(fork, fork_cps[0].checkpoint_id)).messages == view.messages
    mock_llm.add_responses(
        calls(("f1", "look", {"what": "fork"})),
        calls(("f2", "look", {"what": "fork again"})),
        {"type": "text", "content": "forked"},
        agent=agent.name,
    )
    third = await (await helix.execute(agent, "on the fork", session_id=fork)).result()
    fork_cps = await helix.checkpoints.list(fork)
    assert [c.checkpoint_id for c in fork_cps] == [
        f"{fork}:fork",
        *(f"{third.run_id}:{i}" for i in (1, 2, 3)),
    ]
    assert [c.usage.llm_calls for c in fork_cps] == [0, 1, 2, 3], "a fork counts from 0"
    assert [r[1] for r in stored(database_url, fork)] == [0, 1, 3], "step 2 is derived"

    # Prune: the last 3 stay as they were; the derived ones below are hidden, not listed.
    for table in ("helix.checkpoints", "test_shadow.checkpoints", "helix.messages"):
        sql(
            database_url,
            f"UPDATE {table} SET created_at = created_at - interval '2 days' WHERE session_id = %s",
            sid,
        )
    aged = await helix.checkpoints.list(sid)
    report = await helix.checkpoints.prune(older_than=timedelta(days=1), keep_last=3)
    assert report.checkpoints >= len(aged) - 3
    assert await helix.checkpoints.list(sid) == aged[-3:]
    assert sql(
        database_url,
        "SELECT kind FROM helix.checkpoints WHERE session_id = %s ORDER BY ord",
        sid,
    ) == [("base",), ("step",), ("step",)], "a base at the edge (b:1); b:3 is derived"
    with pytest.raises(CheckpointNotFoundError):
        await helix.checkpoints.fork(sid, at=aged[2])
    again = await helix.checkpoints.prune(older_than=timedelta(days=1), keep_last=3)
    assert again.checkpoints == 0
    # A run after the prune counts on from the base.
    mock_llm.add_responses(
        calls(("l4", "look", {"what": "after"})),
        {"type": "text", "content": "after"},
        agent=agent.name,
    )
    await (await helix.execute(agent, "after", session_id=sid)).result()
    after = await helix.checkpoints.list(sid)
    assert after[:3] == aged[-3:] and len(after) == 5
    assert after[-1].usage == await helix.get_usage(session_id=sid)
    assert after[-1].state["count"] == 5


async def test_a_derived_checkpoint_reads_like_a_stored_one(
    helix, make_agent, mock_llm, database_url
):
    """Only the middle step of three is derived: the first holds the state the run
    started with, the last ends the run. Read by its id, it is the listed one."""
    agent = make_agent(tools=[bump, look], state_schema=Counter)
    mock_llm.add_responses(
        calls(("l1", "look", {"what": "a"})),
        calls(("l2", "look", {"what": "b"})),
        {"type": "text", "content": "done"},
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "go")).result()
    cps = await helix.checkpoints.list(result.session_id)
    assert [c.kind for c in cps] == ["step"] * 3
    assert [r[1] for r in stored(database_url, result.session_id)] == [1, 3]
    # The same derived checkpoint, read by its id, with its messages.
    view = await helix.checkpoints.get(result.session_id, cps[1].checkpoint_id)
    assert view.checkpoint == cps[1] and len(view.messages) == cps[1].message_seq


# The last commit before migration 0030: each of its steps stores a checkpoint row.
BEFORE = PreviousRelease("7396713470f36376649c8d5ce6d94a3a3fc77b91", "before-0030")
APP = Path(__file__).parent / "apps" / "derived_checkpoints_app.py"


def _spawn(code: Interpreter, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("HELIX_")}
    if code.path is not None:
        env["PYTHONPATH"] = code.path
    return forkserver.Popen(
        [code.python, str(APP), *args],
        env=env,
        cwd=args[2],
        stdout=subprocess.PIPE,
        stderr=open(Path(args[2]) / f"stderr-{args[3]}-{uuid.uuid4().hex[:6]}.log", "w"),
        text=True,
    )


def _run(code: Interpreter, *args: str) -> Any:
    proc = _spawn(code, *args)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, list(Path(args[2]).glob("stderr-*"))
    return json.loads(out.strip().splitlines()[-1])


def _listed_and_stored(url: str, session_id: str) -> tuple[int, int]:
    [row] = sql(
        url,
        "SELECT (SELECT count(*) FROM helix.session_checkpoints WHERE session_id = %s), "
        "(SELECT count(*) FROM helix.checkpoints WHERE session_id = %s)",
        session_id,
        session_id,
    )
    return int(row[0]), int(row[1])


@pytest.mark.crash
def test_runs_spanning_the_migration_and_older_builds_list_what_the_trigger_gave(
    empty_database_url: str, tmp_path: Path
) -> None:
    """An older build starts two runs: one waits for approval, one is killed in a tool.
    Migration 0030 runs; this build recovers the killed one and approves the other (no
    checkpoint missing or twice). Then an older build writes a session on the migrated
    database (every step stored, by this migration's trigger), and this build does."""
    url = empty_database_url
    old = previous_code(BEFORE, tmp_path / "old")
    new = Interpreter(sys.executable, None)
    apply_migrations(url, directory=tmp_path / "old" / "migrations")
    assert "0030_derived_checkpoints" not in applied_migrations(url)
    install(url)
    executor = f"derived-{uuid.uuid4().hex[:8]}"
    marks = str(tmp_path)

    proc = _spawn(old, url, executor, marks, "start")
    assert proc.stdout is not None
    ids = json.loads(proc.stdout.readline())
    (tmp_path / "ids.json").write_text(json.dumps(ids))
    waiting = "SELECT status FROM helix.runs WHERE run_id = %s"
    wait_for(lambda: sql(url, waiting, ids["approve"][1]) == [("waiting",)])
    wait_for(lambda: (tmp_path / "in_slow").exists())
    sigkill(proc)
    before = {k: _listed_and_stored(url, sid) for k, (sid, _) in ids.items()}
    assert before == {"approve": (3, 3), "crash": (1, 1)}, "a:1, a:2, a:3's head; c:1"

    assert "0030_derived_checkpoints" in apply_migrations(url)
    assert compare(url)  # as they were
    assert _run(new, url, executor, marks, "finish") == {
        "approve": "completed",
        "crash": "completed",
    }
    assert compare(url)
    # approve: a:3 derived after its head; crash: c:2 (recovered) derived, c:3 wrote state
    assert {k: _listed_and_stored(url, sid) for k, (sid, _) in ids.items()} == {
        "approve": (5, 4),
        "crash": (4, 3),
    }
    crash_sid, crash_rid = ids["crash"]
    assert sql(
        url,
        "SELECT step FROM helix.session_checkpoints WHERE session_id = %s ORDER BY ord",
        crash_sid,
    ) == [(1,), (2,), (3,), (4,)], "each step once, after the kill"

    older = _run(old, url, executor, marks, "write")
    listed = compare(url)
    assert _listed_and_stored(url, older) == (listed[older], listed[older]), "all stored"
    newer = _run(new, url, executor, marks, "write")
    listed = compare(url)
    assert listed[newer] == listed[older] == 6
    assert _listed_and_stored(url, newer) == (6, 5), "count's step 2 is derived"
