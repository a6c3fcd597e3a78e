"""`helix-dbos checkpoints / transcript --at / fork / prune` (issue 30) in subprocesses
against the test database, next to in-process runs."""

from __future__ import annotations

import asyncio
import json

import pytest
from helpers import calls, sql
from test_cli import helix_dbos

from helix_dbos import tool


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@pytest.fixture
async def finished(helix, make_agent, mock_llm):
    agent = make_agent(tools=[add])
    mock_llm.add_responses(
        calls(("a1", "add", {"a": 2, "b": 3})),
        {"type": "text", "content": "2 + 3 = 5"},
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "what is 2 + 3?")).result()
    assert result.status == "completed"
    return result, agent


async def test_checkpoints_transcript_at_and_fork(helix, database_url, finished, mock_llm):
    result, agent = finished
    listed = await helix_dbos(database_url, "checkpoints", result.session_id, "--json")
    assert listed.returncode == 0, listed.stderr
    cps = json.loads(listed.stdout)
    assert [(c["kind"], c["step"]) for c in cps] == [("step", 1), ("step", 2)]
    table = await helix_dbos(database_url, "checkpoints", result.session_id[:12])
    assert table.returncode == 0 and cps[0]["checkpoint_id"] in table.stdout

    first = cps[0]["checkpoint_id"]
    at = await helix_dbos(database_url, "transcript", result.session_id, "--at", first, "--json")
    assert at.returncode == 0, at.stderr
    assert [m["role"] for m in json.loads(at.stdout)] == ["user", "assistant", "tool"]
    plain = await helix_dbos(database_url, "transcript", result.session_id, "--at", first)
    assert "tool:add" in plain.stdout and "2 + 3 = 5" not in plain.stdout

    forked = await helix_dbos(
        database_url, "fork", result.session_id, "--at", first, "--state", '{"k": 1}', "--json"
    )
    assert forked.returncode == 0, forked.stderr
    new = json.loads(forked.stdout)["session_id"]
    assert sql(
        database_url,
        "SELECT forked_from_session_id, forked_from_checkpoint_id, state FROM helix.sessions "
        "WHERE session_id = %s",
        new,
    ) == [(result.session_id, first, {"k": 1})]
    mock_llm.add_responses({"type": "text", "content": "five"}, agent=agent.name)
    resumed = await (await helix.resume(new)).result()
    assert resumed.output == "five"


async def test_bad_checkpoint_and_age_exit_2_with_one_line(database_url, finished):
    result, _ = finished
    for args, message in [
        (("fork", result.session_id, "--at", "nope"), "Checkpoint 'nope' does not exist"),
        (("transcript", result.session_id, "--at", "nope"), "Checkpoint 'nope' does not exist"),
        (("checkpoints", "ses_unknown"), "Session 'ses_unknown' does not exist"),
        (("prune", "--older-than", "soon"), "'soon' is not an age"),
        (("fork", result.session_id, "--at", "x", "--state", "[1]"), "JSON object"),
    ]:
        proc = await helix_dbos(database_url, *args)
        assert proc.returncode == 2 and proc.stdout == "", (args, proc.stdout, proc.stderr)
        assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr


async def workflow_done(database_url: str, workflow_id: str) -> None:
    """A caller has its result from the run's row a moment before DBOS marks the
    workflow done; prune removes only ended workflows."""
    for _ in range(200):
        status = sql(
            database_url,
            "SELECT status FROM dbos.workflow_status WHERE workflow_uuid = %s",
            workflow_id,
        )
        if status == [("SUCCESS",)]:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"workflow {workflow_id} never ended")


async def test_prune_from_the_cli(database_url, finished):
    result, _ = finished
    await workflow_done(database_url, f"helix-{result.run_id}")
    for table in ("helix.checkpoints", "helix.messages"):  # a derived one's: its messages'
        sql(
            database_url,
            f"UPDATE {table} SET created_at = created_at - interval '40 days' "
            "WHERE session_id = %s",
            result.session_id,
        )
    sql(
        database_url,
        "UPDATE helix.runs SET finished_at = finished_at - interval '40 days' WHERE run_id = %s",
        result.run_id,
    )
    proc = await helix_dbos(
        database_url, "prune", "--older-than", "30d", "--keep-last", "1", "--json"
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["checkpoints"] >= 1 and report["workflows"] >= 1
    assert sql(
        database_url,
        "SELECT step FROM helix.session_checkpoints WHERE session_id = %s",
        result.session_id,
    ) == [(2,)]
    assert sql(
        database_url,
        "SELECT count(*) FROM dbos.workflow_status WHERE workflow_uuid = %s",
        f"helix-{result.run_id}",
    ) == [(0,)]
    assert sql(
        database_url, "SELECT count(*) FROM helix.messages WHERE session_id = %s", result.session_id
    ) == [(4,)]
