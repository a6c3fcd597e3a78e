"""A chunk a reader saw survives a PostgreSQL crash, so its seq is never handed to
another chunk (issue 46).

Live chunks (text deltas, a slow tool's `tool_start`) and a slow step's head used to
commit without waiting for their WAL flush: a reader saw them at once, a crash lost
them, and the next chunk took the lost seq, which a reader resuming after it never
got. Here, on a cluster of the test's own whose WAL writer flushes only every 10 s (so
a commit that does not flush is lost by an immediate stop), the live writers'
statements commit, a reader reads them, the server crashes, and a reader resuming
from every seq it saw gets every chunk once.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from pg_cluster import Cluster
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine
from test_final_write import AGENT, open_run

from helix_dbos.orchestration.types import LLMUsage, Message, ToolCall
from helix_dbos.runtime.steps.live_chunks import tool_start_chunk
from helix_dbos.store import repository as repo
from helix_dbos.store.database import sqlalchemy_url
from helix_dbos.store.migrations import apply_migrations
from helix_dbos.store.repository import UsageRecord

pytestmark = pytest.mark.faults


@pytest.fixture
def cluster(tmp_path: Path):
    own = Cluster(tmp_path / "pg")
    own.start()
    with psycopg.connect(own.url, autocommit=True) as conn:
        # Nothing but a commit's own flush writes the WAL out within the test.
        conn.execute("ALTER SYSTEM SET wal_writer_delay = '10s'")
        conn.execute("ALTER SYSTEM SET wal_writer_flush_after = '1GB'")
    own.restart()
    apply_migrations(own.url)
    yield own
    own.destroy()


async def _connect(url: str) -> tuple[object, AsyncConnection]:
    engine = create_async_engine(sqlalchemy_url(url))
    conn = await (await engine.connect()).execution_options(isolation_level="AUTOCOMMIT")
    return engine, conn


async def _read_all(url: str, session_id: str, after: int = 0) -> list[tuple[int, str]]:
    engine, conn = await _connect(url)
    try:
        rows = await repo.load_chunks(conn, session_id, after_seq=after)
        keyed = list(
            await conn.exec_driver_sql(
                "SELECT seq, chunk_key FROM helix.stream_chunks WHERE session_id = %s "
                "AND seq > %s ORDER BY seq",
                (session_id, after),
            )
        )
        assert [r[0] for r in rows] == [s for s, _ in keyed]
        return [(int(s), str(k)) for s, k in keyed]
    finally:
        await conn.close()
        await engine.dispose()  # type: ignore[attr-defined]


@pytest.mark.parametrize("head_first", [True, False], ids=["chunks_last", "head_last"])
async def test_a_chunk_a_reader_saw_keeps_its_seq_through_a_crash(
    cluster: Cluster, head_first: bool
) -> None:
    engine, conn = await _connect(cluster.url)
    session_id, run_id = await open_run(conn)
    call = ToolCall(id="c1", name="slow", arguments={})

    async def live_chunks() -> None:
        """A text delta (`DeltaWriter`) and a slow tool's `tool_start` (`write_chunks`)."""
        delta = (f"{run_id}:1:delta:x:0", "text_delta", {"delta": "hi"})
        await repo.insert_chunks(conn, session_id, run_id, AGENT, 1, [delta])
        start = tool_start_chunk(run_id, 1, call)
        await repo.insert_chunks(conn, session_id, run_id, AGENT, 1, [start])

    async def slow_head() -> None:
        """A slow step's head (`SlowHead`)."""
        head = Message(role="assistant", content="calling", tool_calls=[call])
        usage = UsageRecord(f"{run_id}:1:llm", "llm", 1, llm=LLMUsage(input_tokens=1))
        assert await repo.commit_step_head(
            conn,
            session_id=session_id,
            run_id=run_id,
            agent_name=AGENT,
            step=1,
            messages=[head],
            usage=[usage],
        )

    # The last commit before the crash is the one no later commit's flush covers.
    for write in (slow_head, live_chunks) if head_first else (live_chunks, slow_head):
        await write()
    await conn.close()
    await engine.dispose()

    seen = await _read_all(cluster.url, session_id)  # a reader saw them
    assert [k.split(":", 1)[1] for _, k in seen][-2:] == ["1:delta:x:0", "1:c1:start"]

    cluster.crash_restart()
    cluster.wait_ready()

    engine, conn = await _connect(cluster.url)
    after_crash = await _read_all(cluster.url, session_id)
    assert after_crash == seen  # nothing a reader saw was lost
    messages = await conn.exec_driver_sql(
        "SELECT role, content FROM helix.messages WHERE session_id = %s ORDER BY seq", (session_id,)
    )
    assert [tuple(m) for m in messages] == [("user", "go"), ("assistant", "calling")]
    await repo.insert_chunks(
        conn,
        session_id,
        run_id,
        AGENT,
        1,
        [(f"{run_id}:1:delta:x:1", "text_delta", {"delta": "!"})],
    )
    await conn.close()
    await engine.dispose()

    everything = await _read_all(cluster.url, session_id)
    assert len({s for s, _ in everything}) == len(everything)
    for last_seen, _ in seen:  # a reader resuming from any seq it saw gets the rest once
        resumed = await _read_all(cluster.url, session_id, after=last_seen)
        assert resumed == [c for c in everything if c[0] > last_seen]
        assert resumed[-1][1] == f"{run_id}:1:delta:x:1"
