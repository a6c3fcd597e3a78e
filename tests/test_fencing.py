"""Fencing without exits: a worker that cannot reach the database waits instead of
exiting, and a write of an execution that lost its workflow cannot land.

The outage test stops a PostgreSQL cluster of its own (pgserver's `pg_ctl`), never the
test session's server."""

from __future__ import annotations

import json
import shlex
import time
import uuid
from collections.abc import AsyncIterator

import psycopg
import pytest
from helpers import lines, sql, wait_for
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine
from test_crash import assert_transcript_is_clean, spawn

from helix_dbos import HelixDBOS
from helix_dbos.orchestration.types import Message
from helix_dbos.store import repository as repo
from helix_dbos.store.database import sqlalchemy_url
from helix_dbos.store.driver import DriverConnection
from helix_dbos.store.features import remote_children as remote
from helix_dbos.store.run_bounds import end_run, end_step_and_run, open_new_session_run

AGENT = "fencing_agent"


@pytest.fixture
async def conn(helix: HelixDBOS, database_url: str) -> AsyncIterator[DriverConnection]:
    """A psycopg autocommit connection of this test's own, under helix's driver."""
    engine = create_async_engine(sqlalchemy_url(database_url))
    async with engine.connect() as connection:
        connection = await connection.execution_options(isolation_level="AUTOCOMMIT")
        raw = (await connection.get_raw_connection()).driver_connection
        assert isinstance(raw, psycopg.AsyncConnection)
        yield DriverConnection(raw)
    await engine.dispose()


async def owned_run(
    conn: DriverConnection, sa: AsyncConnection | None = None
) -> tuple[str, str, str]:
    """A live run whose workflow row says execution `token-1` owns it."""
    session_id, run_id = f"ses_{uuid.uuid4().hex}", f"run_{uuid.uuid4().hex}"
    workflow_id = f"wf_{run_id}"
    await open_new_session_run(
        conn,
        session_id=session_id,
        run_id=run_id,
        workflow_id=workflow_id,
        agent_name=AGENT,
        state={},
        max_steps=10,
        options={},
        messages=[Message(role="user", content="go")],
    )
    await conn.execute(repo._sql("SELECT pg_advisory_unlock_all()"))
    await conn.execute(
        repo._sql(
            "INSERT INTO dbos.workflow_status (workflow_uuid, status, name, owner_xid) "
            "VALUES (:wid, 'PENDING', 'helix.agent_run', 'token-1')"
        ),
        {"wid": workflow_id},
    )
    return session_id, run_id, workflow_id


async def counts(conn: DriverConnection, session_id: str, run_id: str) -> tuple:
    row = await conn.execute(
        repo._sql(
            "SELECT (SELECT count(*) FROM helix.messages WHERE session_id = :sid), "
            "(SELECT count(*) FROM helix.usage WHERE session_id = :sid), "
            "(SELECT count(*) FROM helix.stream_chunks WHERE session_id = :sid), "
            "(SELECT status || ':' || committed_step || ':' || committed_head "
            "FROM helix.runs WHERE run_id = :rid)"
        ),
        {"sid": session_id, "rid": run_id},
    )
    return row.one()


def refused(exc: pytest.ExceptionInfo[DBAPIError]) -> bool:
    return getattr(exc.value.orig, "sqlstate", None) == repo.OWNER_LOST


async def test_a_write_of_an_execution_that_lost_its_workflow_lands_nothing(conn) -> None:
    """Each of a workflow's writes (a step's rows, its head, the final write in one or two
    statements) checks the execution's ownership token in the same statement: with the
    token of an execution whose workflow was handed to another, it raises and lands
    nothing, not even a row keyed as a replay would be."""
    session_id, run_id, workflow_id = await owned_run(conn)
    mine, stale = (workflow_id, "token-1"), (workflow_id, "token-0")
    step = {"session_id": session_id, "run_id": run_id, "agent_name": AGENT, "state": None}
    said = [Message(role="assistant", content="one")]
    wrote = await repo.commit_step_rows(
        conn, step=1, messages=said, usage=[], chunks=[], owner=mine, **step
    )
    assert wrote.first_seq is not None, "the owner writes"
    before = await counts(conn, session_id, run_id)

    late = [Message(role="assistant", content="late")]
    chunk = [(f"{run_id}:late", "custom", {"event": "late", "data": True})]
    with pytest.raises(DBAPIError) as step_rows:
        await repo.commit_step_rows(
            conn, step=2, messages=late, usage=[], chunks=chunk, owner=stale, **step
        )
    with pytest.raises(DBAPIError) as replayed:  # a replay's keyed no-op is refused too
        await repo.commit_step_rows(
            conn, step=1, messages=said, usage=[], chunks=[], owner=stale, **step
        )
    with pytest.raises(DBAPIError) as head:
        await repo.commit_step_head(
            conn,
            session_id=session_id,
            run_id=run_id,
            agent_name=AGENT,
            step=2,
            messages=late,
            usage=[],
            owner=stale,
        )
    ending = {
        "session_id": session_id,
        "run_id": run_id,
        "agent_name": AGENT,
        "step": 2,
        "status": "completed",
        "output": "late",
        "error": None,
        "stop_reason": None,
        "notify": True,
    }
    with pytest.raises(DBAPIError) as final:
        await end_step_and_run(
            conn,
            messages=late,
            state=None,
            usage=[],
            step_chunks=[],
            head_messages=0,
            end_chunks=chunk,
            owner=stale,
            **ending,
        )
    with pytest.raises(DBAPIError) as ended:
        await end_run(conn, chunks=chunk, owner=stale, **ending)
    assert all(map(refused, (step_rows, replayed, head, final, ended)))
    assert await counts(conn, session_id, run_id) == before, "nothing landed"

    # The owner, and a write from outside any workflow (an abort), still land.
    assert (await end_run(conn, chunks=chunk, owner=None, **ending)).ended
    assert (await counts(conn, session_id, run_id))[3].startswith("completed")


async def test_a_live_chunk_of_an_execution_that_lost_its_workflow_lands_nothing(conn) -> None:
    """Live chunks (text deltas, a slow tool's `tool_start`) are written outside the
    step's rows, with a key of their own (a delta's holds its attempt), so a fenced
    execution's late one would land beside the new owner's: the same statement checks
    the ownership token (issue 46)."""
    session_id, run_id, workflow_id = await owned_run(conn)
    mine, stale = (workflow_id, "token-1"), (workflow_id, "token-0")
    before = await counts(conn, session_id, run_id)
    delta = [(f"{run_id}:1:delta:old:0", "text_delta", {"delta": "late"})]
    with pytest.raises(DBAPIError) as late:
        await repo.insert_chunks(conn, session_id, run_id, AGENT, 1, delta, owner=stale)
    assert refused(late)
    assert await counts(conn, session_id, run_id) == before, "nothing landed"
    chunk_seq = await conn.execute(
        repo._sql("SELECT chunk_seq FROM helix.sessions WHERE session_id = :sid"),
        {"sid": session_id},
    )
    seq_before = chunk_seq.scalar()
    await repo.insert_chunks(conn, session_id, run_id, AGENT, 1, delta, owner=mine)
    after = await counts(conn, session_id, run_id)
    assert after[2] == before[2] + 1, "the owner's chunk lands"
    chunk_seq = await conn.execute(
        repo._sql("SELECT chunk_seq FROM helix.sessions WHERE session_id = :sid"),
        {"sid": session_id},
    )
    assert chunk_seq.scalar() == seq_before + 1  # the refused write took no seq


async def test_a_remote_childs_row_of_a_fenced_execution_is_not_written(conn) -> None:
    """A remote child's bookkeeping (`helix.remote_children`: its open, start, end and
    each proxied chunk) is written by plain statements from the parent's steps: each
    checks the ownership token in the same statement (issue 46)."""
    session_id, run_id, workflow_id = await owned_run(conn)
    mine, stale = (workflow_id, "token-1"), (workflow_id, "token-0")
    ref = remote.RemoteRef(
        session_id,
        run_id,
        workflow_id,
        AGENT,
        1,
        "rc1",
        "far_tool",
        "http://far",
        "far",
        "ses_far",
        "key",
        "go",
    )
    chunk = remote.ProxiedChunk(7, "ses_far", "run_far", "far", 1, "text_delta", {"delta": "x"})

    async def row() -> tuple | None:
        found = await remote.get_ref(conn, run_id, "rc1")
        return (found.remote_run_id, found.status, found.last_seq) if found else None

    with pytest.raises(DBAPIError) as opened:
        await remote.open_ref(conn, ref, stale)
    assert refused(opened) and await row() is None
    await remote.open_ref(conn, ref, mine)
    before, chunks_before = await row(), await counts(conn, session_id, run_id)
    refusals = []
    for late in (
        remote.mark_started(conn, run_id, "rc1", "run_far", stale),
        remote.proxy_chunk(conn, ref, chunk, stale),
        remote.finish(conn, run_id, "rc1", "failed", "late", owner=stale),
    ):
        with pytest.raises(DBAPIError) as refusal:
            await late
        refusals.append(refusal)
    assert all(map(refused, refusals))
    assert await row() == before and await counts(conn, session_id, run_id) == chunks_before
    await remote.mark_started(conn, run_id, "rc1", "run_far", mine)
    await remote.proxy_chunk(conn, ref, chunk, mine)
    assert await row() == ("run_far", "running", 7), "the owner's writes land"
    assert (await counts(conn, session_id, run_id))[2] == chunks_before[2] + 1


@pytest.mark.crash
def test_a_database_down_for_20_seconds_does_not_stop_a_worker(tmp_path):
    """One worker with runs in flight (each in a tool call); PostgreSQL stops (`-m
    immediate`) for 20 s, well past the worker's 4 s lease, and starts again. The worker
    does not exit (it once exited with code 75 after 2.4 s without a heartbeat): it waits,
    resumes, and completes every run, re-running no completed step."""
    pgserver = pytest.importorskip("pgserver")
    from pgserver._commands import pg_ctl  # noqa: PLC0415 - optional: after importorskip

    server = pgserver.get_server(tmp_path / "pg", cleanup_mode=None)
    database_url = server.get_uri()
    markers = tmp_path / "markers"
    markers.mkdir()
    runs = 3

    def ctl(*args: str) -> None:
        pg_ctl(["-w", *args], pgdata=server.pgdata, user=server.system_user, timeout=60)

    try:
        env = {"CRASH_APP_RUNS": str(runs), "CRASH_APP_POOL_SIZE": "2"}
        proc = spawn("run", database_url, "-", "restart", markers, env=env)
        assert proc.stdout is not None
        started = [json.loads(proc.stdout.readline()) for _ in range(runs)]
        wait_for(lambda: len(lines(markers, "slow_b.log")) == runs)
        # The server's own options (its socket folder, no TCP), for the start after.
        command = shlex.split((server.pgdata / "postmaster.opts").read_text())
        options = shlex.join(command[command.index("-D") + 2 :])
        ctl("stop", "-m", "immediate")
        time.sleep(20)
        assert proc.poll() is None, f"the worker exited with {proc.returncode} during the outage"
        ctl("start", "-l", str(server.pgdata / "restart.log"), "-o", options)
        (markers / "release").touch()
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out
        outcomes = [json.loads(line) for line in out.strip().splitlines()[-runs:]]

        assert [o["status"] for o in outcomes] == ["completed"] * runs, outcomes
        assert lines(markers, "record_a.log") == ["one"] * runs, "no completed step re-ran"
        assert lines(markers, "slow_b.log") == ["two"] * runs
        for run in started:
            assert_transcript_is_clean(database_url, run["session_id"], run["run_id"])
        assert sql(database_url, "SELECT count(*) FROM helix.runs WHERE status = 'failed'") == [
            (0,)
        ]
    finally:
        ctl("stop", "-m", "immediate")
