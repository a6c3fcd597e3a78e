"""Runs no process will resume (issue 45): a run started by an application version that no
live worker runs is refused an answer or an interrupt (nothing is claimed or sent), listed
by `doctor` and `helix-dbos runs --version`, and ended by `helix-dbos abort --version`.

The run here is made "of another version" as an upgrade leaves it: its DBOS workflow row
names a version (`helix-4`) that no live worker runs, while this process runs `helix-test`.
The release test (`test_release_upgrade.py`) starts real runs on an older release.
"""

from __future__ import annotations

import asyncio
import json
import uuid

import httpx
import psycopg
import pytest
from helpers import (
    answered,
    approval_gated_delete,
    calls,
    cli,
    messages_to,
    pending_calls,
    set_version,
    sql,
    wait_for,
)

from helix_dbos import RunOnOtherVersionError, tool
from helix_dbos.server import create_app
from helix_dbos.store.database import libpq_url
from helix_dbos.store.features.workers import heartbeat_application_name

OLD = "helix-4"


@tool(execute="client")
def get_location() -> dict:
    """Ask the user's device for its location."""


async def test_answers_to_a_run_no_worker_runs_are_refused_then_taken_once_served(
    helix, make_agent, mock_llm, database_url
):
    ran: list[str] = []
    agent = make_agent(tools=[approval_gated_delete(ran), get_location])
    mock_llm.add_responses(
        calls(("d1", "delete_file", {"path": "/tmp/v"}), ("c1", "get_location", {})),
        {"type": "text", "content": "done"},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "delete /tmp/v")
    await pending_calls(helix, handle.session_id, 2)
    set_version(database_url, handle.run_id, OLD)

    # The one-statement claim (an approval) and the slower path (a client's result)
    # refuse alike, and so do interrupt, HTTP and the CLI: nothing claimed, nothing sent.
    with pytest.raises(RunOnOtherVersionError, match="'helix-4'.*'helix-test'") as refused:
        await helix.approve(handle.session_id, "d1")
    assert refused.value.version == OLD and refused.value.run_id == handle.run_id
    assert "HELIX_APP_VERSION=helix-4" in str(refused.value)
    assert "helix-dbos abort --version helix-4" in str(refused.value)
    with pytest.raises(RunOnOtherVersionError):
        await helix.submit_tool_result(handle.session_id, "c1", {"lat": 1})
    with pytest.raises(RunOnOtherVersionError):
        await helix.interrupt(handle.session_id)
    app = create_app(helix, allow_unauthenticated=True)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
    ) as client:
        response = await client.post(
            "/submit-tool-result",
            json={
                "session_id": handle.session_id,
                "tool_call_id": "d1",
                "kind": "approval-response",
                "approved": True,
            },
        )
        assert response.status_code == 409 and "helix-4" in response.json()["detail"]
        listed = await client.get("/runs", params={"version": OLD})
        assert [r["run_id"] for r in listed.json()] == [handle.run_id]
        assert listed.json()[0]["app_version"] == OLD
    denied = await cli(database_url, "deny", handle.session_id, "d1")
    assert denied.returncode == 2 and "application version 'helix-4'" in denied.stderr
    interrupted = await cli(database_url, "interrupt", handle.session_id)
    assert interrupted.returncode == 2 and "helix-4" in interrupted.stderr
    assert answered(database_url, handle.run_id) == [("c1", None), ("d1", None)]
    assert messages_to(database_url, handle.run_id) == 0

    # Listed by version and by doctor, with the fix.
    listed_cli = json.loads((await cli(database_url, "runs", "--version", OLD, "--json")).stdout)
    assert [(r["run_id"], r["app_version"]) for r in listed_cli] == [(handle.run_id, OLD)]
    doctor = await cli(database_url, "doctor", "--json")
    check = next(c for c in json.loads(doctor.stdout) if c["name"] == "run versions")
    assert check["level"] == "warn" and handle.run_id in check["found"]
    assert "HELIX_APP_VERSION=helix-4 helix-dbos worker" in check["fix"]
    assert "helix-dbos abort --version helix-4" in check["fix"]

    # A worker of that version serves it again (here: this process's own version back):
    # the answers are taken, and the tool runs once.
    set_version(database_url, handle.run_id, "helix-test")
    await helix.approve(handle.session_id, "d1")
    await helix.submit_tool_result(handle.session_id, "c1", {"lat": 1})
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed" and ran == ["/tmp/v"]
    doctor = await cli(database_url, "doctor", "--json")
    check = next(c for c in json.loads(doctor.stdout) if c["name"] == "run versions")
    assert handle.run_id not in check["found"]


async def test_abort_by_version_ends_only_the_runs_no_worker_runs(
    helix, make_agent, mock_llm, database_url
):
    ran: list[str] = []
    agent = make_agent(tools=[approval_gated_delete(ran)])
    mock_llm.add_responses(  # in the order the two runs ask
        calls(("da", "delete_file", {"path": "/tmp/a"})),
        calls(("db", "delete_file", {"path": "/tmp/b"})),
        {"type": "text", "content": "done"},
        agent=agent.name,
    )
    stranded = await helix.execute(agent, "delete /tmp/a")
    await pending_calls(helix, stranded.session_id)
    served = await helix.execute(agent, "delete /tmp/b")
    await pending_calls(helix, served.session_id)
    set_version(database_url, stranded.run_id, OLD)

    # A version a live worker runs: nothing to abort by version.
    none = await cli(database_url, "abort", "--version", "helix-test", "--json")
    assert json.loads(none.stdout)["run_ids"] == []
    both = await cli(database_url, "abort", stranded.session_id, "--version", OLD)
    assert both.returncode == 2 and "not both" in both.stderr

    aborted = await cli(database_url, "abort", "--version", OLD, "--json")
    assert aborted.returncode == 0, aborted.stderr
    assert json.loads(aborted.stdout) == {
        "action": "aborted",
        "version": OLD,
        "run_ids": [stranded.run_id],
    }
    assert sql(
        database_url, "SELECT status, error FROM helix.runs WHERE run_id = %s", stranded.run_id
    ) == [("aborted", "Run aborted: no live worker runs application version helix-4")]
    assert sql(
        database_url,
        "SELECT status FROM dbos.workflow_status WHERE workflow_uuid = "
        "(SELECT workflow_id FROM helix.runs WHERE run_id = %s)",
        stranded.run_id,
    ) == [("CANCELLED",)]
    # The call got its result, so the session can be continued.
    assert sql(
        database_url,
        "SELECT status FROM helix.tool_calls WHERE run_id = %s",
        stranded.run_id,
    ) != [("pending",)]

    await helix.approve(served.session_id, "db")
    assert (await asyncio.wait_for(served.result(), 60)).status == "completed"
    assert ran == ["/tmp/b"]


async def test_a_message_is_not_stored_behind_a_run_no_worker_runs(
    helix, make_agent, mock_llm, database_url
):
    ran: list[str] = []
    agent = make_agent(tools=[approval_gated_delete(ran)])
    mock_llm.add_responses(
        calls(("d1", "delete_file", {"path": "/tmp/q"})),
        {"type": "text", "content": "next turn"},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "delete /tmp/q")
    await pending_calls(helix, handle.session_id)
    set_version(database_url, handle.run_id, OLD)
    # Queued behind it (enqueue, interrupt, steer), a message would wait forever.
    for strategy in ("enqueue", "interrupt", "steer"):
        with pytest.raises(RunOnOtherVersionError, match="helix-4"):
            await helix.execute(
                agent, "more", session_id=handle.session_id, multitask_strategy=strategy
            )
    assert sql(
        database_url,
        "SELECT count(*) FROM helix.queued_messages WHERE session_id = %s",
        handle.session_id,
    ) == [(0,)]
    # A rollback aborts that run, whatever its version, and the message starts at once.
    second = await helix.execute(
        agent, "more", session_id=handle.session_id, multitask_strategy="rollback"
    )
    result = await asyncio.wait_for(second.result(), 60)
    assert result.status == "completed" and ran == []
    assert sql(database_url, "SELECT status FROM helix.runs WHERE run_id = %s", handle.run_id) == [
        ("aborted",)
    ]


def test_a_live_worker_slow_to_heartbeat_still_serves_its_version(helix, database_url):
    """A live worker is served while it heartbeats within two fifths of its lease and
    half a second (a build before 2026-11-26 heartbeats every fifth of its lease, 3 s
    by default), or while its heartbeat connection is open and its lease holds (a worker
    starved of CPU): migration 0026. A killed worker's connection closes with it, so it
    stops counting 6.5 s after its last heartbeat with the default lease of 15 s."""
    executor = f"stalled-{uuid.uuid4().hex[:8]}"  # no worker of its version claims it
    sql(
        database_url,
        "INSERT INTO helix.workers (executor_id, application_name, application_version, "
        "host, pid, lease_seconds, executes_runs, state, heartbeat_at) "
        "VALUES (%s, 'app', 'helix-stalled', 'h', 1, 15, true, 'live', now() - interval '10 s')",
        executor,
    )
    served = "SELECT helix.version_served('helix-stalled')"

    def beat(seconds_ago: float) -> None:
        sql(
            database_url,
            "UPDATE helix.workers SET heartbeat_at = now() - make_interval(secs => %s) "
            "WHERE executor_id = %s",
            seconds_ago,
            executor,
        )

    try:
        # This process's own worker heartbeats, so an unserved version is refused.
        assert sql(database_url, served) == [(False,)]
        with psycopg.connect(
            libpq_url(database_url), application_name=heartbeat_application_name(executor)
        ) as heartbeat:
            pid = heartbeat.info.backend_pid
            assert sql(database_url, served) == [(True,)]  # silent 10 s, but connected
            beat(16)
            assert sql(database_url, served) == [(False,)]  # its lease lapsed
        # The server lists a closed connection's backend a moment longer (under load).
        gone = "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = %s)"
        wait_for(lambda: sql(database_url, gone, pid) == [(True,)])
        beat(5)  # no connection seen (an older build, a pooler): two fifths of the lease
        assert sql(database_url, served) == [(True,)]
        beat(7)
        assert sql(database_url, served) == [(False,)]
    finally:
        sql(database_url, "DELETE FROM helix.workers WHERE executor_id = %s", executor)
