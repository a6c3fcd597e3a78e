"""The database restarts under in-flight runs, and no run notices (issue 26).

On a PostgreSQL cluster of the test's own (tests/apps/pg_cluster.py, never a shared server),
one worker (tests/apps/outage_app.py) runs the chaos soak's script (parallel async and sync
tools, one changing state; approvals and client tools answered from another process
with a plain `DBOSClient.send`, some twice; one run in six interrupted while it waits)
and runs that delegate to a sub-agent beside a plain tool, while an SSE client of the
worker's HTTP API, in the test process, follows every run. Then the database goes away: (a) `pg_ctl restart -m fast`; (b) two crash
restarts (`pg_ctl stop -m immediate`, a second with no server, and start) a few seconds
apart.

The worker is never restarted. Afterwards: every run ended as scripted (none failed),
its status matching its workflow's; no tool call without its one result; no message,
usage row or terminal chunk twice; no tool or LLM step that DBOS had checkpointed ran
again, and the model was asked exactly once per checkpointed LLM step (a database error
after the model answered never asks it again); every SSE client, reconnecting with
Last-Event-ID whenever its response broke off, got each chunk of its run once, in order,
with no gap.

CI runs a short version of each. A longer one, on demand:
    HELIX_OUTAGE_RUNS=30 HELIX_OUTAGE_RESTARTS=6 pytest -s -m faults tests/test_db_outage.py
(the figures are printed).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import selectors
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import forkserver
import httpx
import pytest
from helpers import sql
from pg_cluster import Cluster
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import create_async_engine
from test_chaos_soak import (
    DBOS_TERMINAL,
    LIVE,
    check_no_completed_step_ran_again,
    check_statuses,
    check_transcripts,
    check_usage_and_chunks,
)

from helix_dbos.store.database import sqlalchemy_url
from helix_dbos.store.statement_pool import StatementPool

APP = Path(__file__).parent / "apps" / "outage_app.py"
RUNS = int(os.environ.get("HELIX_OUTAGE_RUNS", "8"))
LEADS = int(os.environ.get("HELIX_OUTAGE_LEADS", str(max(2, RUNS // 4))))
RESTARTS = int(os.environ.get("HELIX_OUTAGE_RESTARTS", "0"))  # 0: each test's own count

pytestmark = pytest.mark.faults


@pytest.fixture
def cluster(tmp_path: Path):
    own = Cluster(tmp_path / "pg")
    own.start()
    yield own
    own.destroy()


class Fleet:
    """The worker and the answering process, on the test's cluster."""

    def __init__(self, url: str, markers: Path, *, park_every_wait: bool = False) -> None:
        self.url, self.markers = url, markers
        self.executor = f"outage-{uuid.uuid4().hex[:6]}"
        # park_every_wait: each wait for a human lets go of its coroutine at once, so
        # the answers reach parked runs, across the restarts (`wait_parking.py`)
        env = {**os.environ, "HELIX_OUTAGE_IN_MEMORY": "0"} if park_every_wait else None
        # and a quarter of the answers come after the parking sweep: some wait is parked
        # whatever the timing (a young wait is parked only once it is a second old)
        self.answerer_env = (
            {**os.environ, "HELIX_SOAK_LATE_ANSWERS": "0.25"} if park_every_wait else None
        )
        self.worker = forkserver.Popen(
            [sys.executable, str(APP), "serve", url, self.executor, str(markers)]
            + [str(RUNS), str(LEADS)],
            stdout=subprocess.PIPE,
            stderr=open(markers / "worker.err", "w"),  # noqa: SIM115 (the child owns it)
            text=True,
            env=env,
        )
        self.answerer: subprocess.Popen[bytes] | None = None
        self.answerers = 0
        self.soak: list[tuple[int, str, str]] = []
        self.leads: list[tuple[str, str]] = []
        self.readers: list[SSEReader] = []

    def wait_started(self, timeout: float = 120) -> None:
        assert self.worker.stdout is not None
        selector = selectors.DefaultSelector()
        selector.register(self.worker.stdout, selectors.EVENT_READ)
        ready = selector.select(timeout)
        selector.close()
        line = self.worker.stdout.readline() if ready else ""
        assert line, f"the worker did not start:\n{self.err()}"
        started = json.loads(line)
        self.soak = [tuple(r) for r in started["soak"]]
        self.leads = [tuple(r) for r in started["lead"]]
        self.readers = [
            SSEReader(started["url"], session_id, run_id)
            for run_id, session_id in [(r[1], r[2]) for r in self.soak] + self.leads
        ]
        self.start_answerer()

    def start_answerer(self) -> None:
        """The answering process (a plain DBOSClient). One that connects while the
        database is down exits (DBOSClient's constructor raises): it is started again,
        as a user's client would be; the worker is never restarted."""
        self.answerers += 1
        self.answerer = forkserver.Popen(
            [sys.executable, str(APP.with_name("soak_app.py")), "answer", self.url]
            + [str(self.markers), str(26 + self.answerers)],
            stdout=subprocess.DEVNULL,
            stderr=open(self.markers / "answerer.err", "a"),  # noqa: SIM115
            env=self.answerer_env,
        )

    @property
    def run_ids(self) -> list[str]:
        return [r[1] for r in self.soak] + [r[0] for r in self.leads]

    def err(self) -> str:
        return (self.markers / "worker.err").read_text()[-4000:]

    def wait_ended(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not all_ended(self.url, self.run_ids):
            assert self.worker.poll() is None, f"the worker exited:\n{self.err()}"
            assert time.monotonic() < deadline, stuck(self.url, self.run_ids)
            if self.answerer is not None and self.answerer.poll() is not None:
                self.start_answerer()
            time.sleep(0.25)
        for reader in self.readers:
            reader.join(max(1.0, deadline - time.monotonic()))
            assert not reader.is_alive(), f"the SSE reader of {reader.run_id} did not finish"

    def stop(self) -> None:
        (self.markers / "stop").touch()
        if self.answerer is not None:
            try:
                self.answerer.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.answerer.kill()
        if self.worker.poll() is None:
            self.worker.kill()
            self.worker.wait(timeout=30)


class SSEReader(threading.Thread):
    """A client of the worker's `/sse` for one run, as a browser's EventSource: on a
    dropped response it reconnects with Last-Event-ID; it stops at the `end` event."""

    def __init__(self, base_url: str, session_id: str, run_id: str) -> None:
        super().__init__(daemon=True)
        self.base_url, self.session_id, self.run_id = base_url, session_id, run_id
        self.seqs: list[int] = []
        self.reconnects = 0
        self.start()

    def run(self) -> None:
        params = {"session_id": self.session_id, "run_id": self.run_id}
        # One client for every reconnect: a client each time built a TLS context (about
        # 40 ms of CPU), twice a second through a 20 s outage.
        with httpx.Client(timeout=60) as client:
            self._read(client, params)

    def _read(self, client: httpx.Client, params: dict[str, str]) -> None:
        last: int | None = None
        while True:
            headers = {"Last-Event-ID": str(last)} if last is not None else {}
            try:
                with client.stream(
                    "GET", f"{self.base_url}/sse", params=params, headers=headers
                ) as response:
                    if response.status_code == 200:
                        seq: int | None = None
                        for line in response.iter_lines():
                            if line.startswith("id: "):
                                seq = int(line[4:])
                            elif line == "event: end":
                                return
                            elif line == "" and seq is not None:
                                self.seqs.append(seq)
                                last, seq = seq, None
            except httpx.HTTPError:
                pass  # the server's database went away mid-response: reconnect
            self.reconnects += 1
            time.sleep(0.5)


def q(url: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    for attempt in range(60):
        try:
            return sql(url, query, *params)
        except Exception:  # the test's own server, restarting
            if attempt == 59:
                raise
            time.sleep(0.5)
    raise AssertionError("unreachable")


def all_ended(url: str, run_ids: list[str]) -> bool:
    rows = q(
        url,
        "SELECT count(*) FILTER (WHERE r.status = ANY(%s) OR w.status IS NULL "
        "OR w.status <> ALL(%s)) FROM helix.runs r "
        "LEFT JOIN dbos.workflow_status w ON w.workflow_uuid = r.workflow_id "
        "WHERE r.run_id = ANY(%s)",
        list(LIVE),
        list(DBOS_TERMINAL),
        run_ids,
    )
    return rows[0][0] == 0


def stuck(url: str, run_ids: list[str]) -> str:
    return str(
        q(
            url,
            "SELECT r.run_id, r.status, r.waiting_for, r.step_count, r.error, w.status "
            "FROM helix.runs r LEFT JOIN dbos.workflow_status w "
            "ON w.workflow_uuid = r.workflow_id WHERE r.run_id = ANY(%s) "
            "AND (r.status = ANY(%s) OR w.status <> ALL(%s))",
            run_ids,
            list(LIVE),
            list(DBOS_TERMINAL),
        )
    )


def outage(cluster: Cluster, fleet: Fleet, restarts: list[str], seed: int) -> dict[str, Any]:
    """Start the runs, take the database away as `restarts` says ('fast' or 'crash'),
    a few seconds apart, wait for every run to end, and check everything."""
    rng = random.Random(seed)
    figures: dict[str, Any] = {"runs": RUNS + LEADS, "restarts": restarts, "seed": seed}
    began = time.monotonic()
    try:
        fleet.wait_started()
        down = 0.0
        for kind in restarts:
            time.sleep(rng.uniform(0.5, 3.0))  # runs in model calls, tools, waits, writes
            t0 = time.monotonic()
            # A crash leaves the server down a second, so reads and writes fail meanwhile.
            cluster.restart() if kind == "fast" else cluster.crash_restart(down_seconds=1.0)
            down = max(down, time.monotonic() - t0)
        figures["longest_restart_seconds"] = round(down, 2)
        fleet.wait_ended(timeout=120 + 4 * (RUNS + LEADS))
    finally:
        fleet.stop()
    figures["wall_seconds"] = round(time.monotonic() - began, 1)
    figures["answerer_starts"] = fleet.answerers
    check(fleet, figures)
    return figures


def unpaired(url: str, calls: Counter[Any], results: Counter[Any]) -> str:
    """Name each (session, call) without exactly one result, with that session's messages."""
    bad = [(k, results[k]) for k in calls if results[k] != 1]
    bad += [(k, results[k]) for k in results if k not in calls]
    lines = []
    for (session, call), n in bad:
        lines.append(f"session {session} call {call!r}: {n} result(s)")
        rows = q(
            url,
            "SELECT seq, role, tool_call_id, tool_calls, left(content, 120) "
            "FROM helix.messages WHERE session_id = %s ORDER BY seq",
            session,
        )
        lines += [f"  {r}" for r in rows]
    return "\n".join(lines)


def check(fleet: Fleet, figures: dict[str, Any]) -> None:
    url, markers = fleet.url, fleet.markers
    by_index = {index: (run_id, session_id) for index, run_id, session_id in fleet.soak}
    check_statuses(url, by_index, figures)  # every soak run ended as scripted: none failed
    check_transcripts(url, by_index, markers, figures)
    check_usage_and_chunks(url, by_index, figures)

    # The leads and their children: completed, their transcripts paired, nothing doubled.
    leads = [r for r, _ in fleet.leads]
    sessions = [s for _, s in fleet.leads]
    children = q(
        url,
        "SELECT r.run_id, r.session_id FROM helix.runs r JOIN helix.sessions s USING (session_id) "
        "WHERE s.parent_session_id = ANY(%s)",
        sessions,
    )
    assert len(children) == len(leads), children
    every = leads + [c[0] for c in children]
    statuses = Counter(
        r[0] for r in q(url, "SELECT status FROM helix.runs WHERE run_id = ANY(%s)", every)
    )
    figures["lead_and_child_statuses"] = dict(statuses)
    assert statuses == {"completed": len(every)}, stuck(url, every)
    all_sessions = sessions + [c[1] for c in children]
    messages = q(
        url,
        "SELECT session_id, role, tool_call_id, tool_calls FROM helix.messages "
        "WHERE session_id = ANY(%s) ORDER BY session_id, seq",
        all_sessions,
    )
    calls = Counter((m[0], c["id"]) for m in messages if m[3] for c in m[3])
    results = Counter((m[0], m[2]) for m in messages if m[1] == "tool")
    figures["lead_unpaired_tool_calls"] = sum(1 for k in calls if results[k] != 1) + sum(
        1 for k in results if k not in calls
    )
    assert figures["lead_unpaired_tool_calls"] == 0, unpaired(url, calls, results)
    per_session = Counter(m[0] for m in messages)
    assert all(per_session[s] == 5 for s in sessions), per_session  # user, call, 2 results, answer
    assert all(per_session[c[1]] == 4 for c in children), per_session
    usage_dupes = q(
        url,
        "SELECT count(*) FROM (SELECT usage_id FROM helix.usage WHERE run_id = ANY(%s) "
        "GROUP BY usage_id HAVING count(*) > 1) d",
        every,
    )[0][0]
    terminal = q(
        url,
        "SELECT run_id, count(*) FROM helix.stream_events WHERE run_id = ANY(%s) "
        "AND type IN ('run_completed', 'run_failed') AND via_run_id IS NULL GROUP BY 1",
        every,
    )
    assert usage_dupes == 0
    assert sorted(n for _, n in terminal) == [1] * len(every), terminal

    # No completed step ran again (the worker was never killed), and the model was asked
    # once per checkpointed LLM step: no database error made helix ask it again.
    run_ids = fleet.run_ids + [c[0] for c in children]
    check_no_completed_step_ran_again(url, run_ids, markers, {0: None}, figures)
    assert figures["completed_tool_steps_rerun"] == 0
    assert figures["completed_llm_steps_rerun"] == 0
    assert figures["llm_executions"] == figures["llm_steps"], "the model was asked again"
    assert figures["tool_executions"] == figures["tool_steps"], "a tool ran twice"
    figures["failed_runs"] = q(
        url, "SELECT count(*) FROM helix.runs WHERE run_id = ANY(%s) AND status = 'failed'", run_ids
    )[0][0]
    assert figures["failed_runs"] == 0

    check_streams(url, fleet.readers, figures)


def check_streams(url: str, readers: list[SSEReader], figures: dict[str, Any]) -> None:
    """Each SSE reader got its run's chunks (its own and its sub-agents'), each once, in
    order, however often it reconnected."""
    gaps = repeats = 0
    for reader in readers:
        expected = [
            r[0]
            for r in q(
                url,
                "SELECT seq FROM helix.stream_chunks WHERE session_id = %s "
                "AND (run_id = %s OR via_run_id = %s) ORDER BY seq",
                reader.session_id,
                reader.run_id,
                reader.run_id,
            )
        ]
        seen = reader.seqs
        repeats += len(seen) - len(set(seen))
        gaps += len(set(expected) - set(seen))
        assert seen == sorted(seen), (reader.run_id, seen)
    figures["sse_events_read"] = sum(len(r.seqs) for r in readers)
    figures["sse_reconnects"] = sum(r.reconnects for r in readers)
    figures["sse_gaps"] = gaps
    figures["sse_repeats"] = repeats
    assert gaps == 0
    assert repeats == 0


def test_a_restart_costs_the_statement_pool_one_failed_statement(cluster: Cluster) -> None:
    """Item 1: after a restart every pooled connection is dead; the first statement finds
    out, and from then on the pool checks the connections opened before it instead of
    handing out each dead one in turn (one failed statement, not one per connection)."""
    asyncio.run(_pool_failures(cluster))


async def _pool_failures(cluster: Cluster) -> None:
    pool = StatementPool(cluster.url, 6)

    async def one(hold: float = 0) -> None:
        async with pool.connection() as conn:
            await conn.execute(text("SELECT pg_sleep(:s)"), {"s": hold})

    await asyncio.gather(*(one(0.2) for _ in range(6)))  # six connections, all idle now
    cluster.restart()
    failures = 0
    for _ in range(8):
        try:
            await one()
        except DBAPIError as exc:
            assert exc.connection_invalidated
            failures += 1
    await pool.close()
    assert failures <= 1, f"{failures} statements failed on connections dead since the restart"
    assert pool.generations == 2

    # SQLAlchemy's engine (the transactions) retires its whole pool on a disconnect.
    engine = create_async_engine(sqlalchemy_url(cluster.url), pool_size=6, max_overflow=0)

    async def tx(hold: float = 0) -> None:
        async with engine.begin() as conn:
            await conn.execute(text("SELECT pg_sleep(:s)"), {"s": hold})

    await asyncio.gather(*(tx(0.2) for _ in range(6)))
    cluster.crash_restart()
    failures = 0
    for _ in range(8):
        try:
            await tx()
        except DBAPIError:
            failures += 1
    await engine.dispose()
    assert failures <= 1, f"{failures} transactions failed on connections dead since the restart"


def test_a_restart_while_a_step_waits_and_while_the_model_answers(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Item 2: the database restarts (1) while a step's rows are in memory, waiting for the
    write-ahead inside the next LLM step, and (2) while the model answers, before its text
    is streamed; with every pooled connection dead. The run completes; the model is asked
    once per step and the tool runs once (before the fix: the write-ahead spent the LLM
    step's provider retries on dead connections, or the streamed text's write failed the
    run at once as "LLM call failed")."""
    app = forkserver.Popen(
        [sys.executable, str(APP), "hold", cluster.url, f"hold-{uuid.uuid4().hex[:6]}"]
        + [str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=open(tmp_path / "worker.err", "w"),  # noqa: SIM115 (the child owns it)
        text=True,
    )
    try:
        for marker, restart in (("held", cluster.restart), ("model2", cluster.crash_restart)):
            deadline = time.monotonic() + 120
            while not (tmp_path / marker).exists():
                assert app.poll() is None, (tmp_path / "worker.err").read_text()[-3000:]
                assert time.monotonic() < deadline, f"never reached {marker}"
                time.sleep(0.05)
            restart()
            (tmp_path / ("go1" if marker == "held" else "go2")).touch()
        out, _ = app.communicate(timeout=300)
    finally:
        if app.poll() is None:
            app.kill()
    err = (tmp_path / "worker.err").read_text()
    result = json.loads(out.strip().splitlines()[-1])
    assert result == {"status": "completed", "error": None}, err[-3000:]
    calls = Counter((tmp_path / "calls.log").read_text().split())
    assert calls == {"model": 2, "tool": 1}, calls
    unpaired = q(
        cluster.url,
        "SELECT count(*) FROM helix.messages m, jsonb_array_elements(m.tool_calls) c "
        "WHERE NOT EXISTS (SELECT 1 FROM helix.messages t WHERE t.session_id = m.session_id "
        "AND t.tool_call_id = c ->> 'id')",
    )[0][0]
    assert unpaired == 0


def test_past_the_horizon_a_run_stays_pending_for_recovery(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Item 2: the database stays down past `database_outage_seconds` (2 s here) after the
    model answered, while the LLM step writes what it streamed: the run does not fail,
    its workflow stays PENDING, and the worker's next start (same executor id) resumes
    and completes it. The LLM step never finished, so recovery runs it again (the model
    is asked again, as after a SIGKILL there); the tool step, checkpointed, does not."""
    executor = f"hold-{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "HELIX_OUTAGE_HORIZON": "2", "HELIX_OUTAGE_LEASE": "15"}

    def launch(mode: str) -> subprocess.Popen[str]:
        return forkserver.Popen(
            [sys.executable, str(APP), mode, cluster.url, executor, str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=open(tmp_path / f"{mode}.err", "w"),
            text=True,
            env=env,
        )

    app = launch("hold")
    err = tmp_path / "hold.err"
    try:
        wait_until(lambda: (tmp_path / "held").exists(), app, err)
        (tmp_path / "go1").touch()
        wait_until(lambda: (tmp_path / "model2").exists(), app, err)
        cluster.stop()
        (tmp_path / "go2").touch()  # the model answers; its text waits for the database
        wait_until(lambda: "helix gave up waiting for the database" in err.read_text(), app, err)
        cluster.start()
        session_id, run_id = json.loads((tmp_path / "run.json").read_text())
        row = q(
            cluster.url,
            "SELECT r.status, w.status FROM helix.runs r JOIN dbos.workflow_status w "
            "ON w.workflow_uuid = r.workflow_id WHERE r.run_id = %s",
            run_id,
        )
        assert row == [("running", "PENDING")], row
        assert app.poll() is None, "the worker did not exit either"
    finally:
        app.kill()
        app.wait(timeout=30)
    again = launch("recover")
    try:
        out, _ = again.communicate(timeout=180)
    finally:
        if again.poll() is None:
            again.kill()
    result = json.loads(out.strip().splitlines()[-1])
    assert result == {"status": "completed", "error": None}, (tmp_path / "recover.err").read_text()
    calls = Counter((tmp_path / "calls.log").read_text().split())
    assert calls == {"model": 3, "tool": 1}, calls


# What the crash interrupts, held by a trigger in the server's first life: the run's
# workflow's end (after the final write), or the last LLM step's checkpoint (after the
# write-ahead of the tool step's rows and the final write).
HELD = {
    "workflow_end": (
        "dbos.workflow_status",
        "BEFORE UPDATE ON dbos.workflow_status FOR EACH ROW WHEN (NEW.status = 'SUCCESS' "
        "AND OLD.status = 'PENDING' AND NEW.workflow_uuid LIKE 'helix-run_%')",
    ),
    "llm_checkpoint": (
        "dbos.operation_outputs",
        "BEFORE INSERT ON dbos.operation_outputs FOR EACH ROW WHEN "
        "(NEW.function_name = 'helix.llm' AND NEW.function_id = 3)",
    ),
}


@pytest.mark.parametrize("held", sorted(HELD))
def test_a_crash_before_a_checkpoint_keeps_the_rows_written_before_it(
    cluster: Cluster, tmp_path: Path, held: str
) -> None:
    """A run's rows commit (the write-ahead of a step's tool results, the final write),
    then PostgreSQL crashes while the next checkpoint is in flight; DBOS retries that
    checkpoint on the restarted server, so nothing replays the writes before it. They
    must have been on disk by then: before the fix they committed without waiting for
    their flush (the checkpoint was to flush them), the crash lost them, and the workflow
    ended SUCCESS with its run `running`, its tool call without a result and no answer.
    Triggers of the test's order the writes (the final write after the LLM step's
    checkpoint, the checkpoint or the workflow's end held until the crash), and the WAL
    writer is slowed so nothing else flushes the rows meanwhile."""
    table, trigger = HELD[held]
    app = forkserver.Popen(
        [sys.executable, str(APP), "hold", cluster.url, f"end-{uuid.uuid4().hex[:6]}"]
        + [str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=open(tmp_path / "worker.err", "w"),  # noqa: SIM115 (the child owns it)
        text=True,
    )
    err = tmp_path / "worker.err"
    try:
        wait_until(lambda: (tmp_path / "held").exists(), app, err)  # the schemas are there
        sql(cluster.url, "ALTER SYSTEM SET wal_writer_delay = '10s'")
        sql(cluster.url, "SELECT pg_reload_conf()")
        sql(
            cluster.url,
            # The server's first life: the triggers below wait only in it.
            "CREATE TABLE public.first_life AS SELECT pg_postmaster_start_time() AS t; "
            "CREATE FUNCTION public.first_life_sleep() RETURNS trigger LANGUAGE plpgsql AS $$ "
            "BEGIN IF pg_postmaster_start_time() = (SELECT t FROM public.first_life) THEN "
            "PERFORM pg_sleep(CAST(TG_ARGV[0] AS float)); END IF; RETURN NEW; END $$; "
            "CREATE TRIGGER late_final_write BEFORE UPDATE ON helix.runs FOR EACH ROW "
            "WHEN (NEW.status = 'completed' AND OLD.status <> 'completed') "
            "EXECUTE FUNCTION public.first_life_sleep('1'); "
            f"CREATE TRIGGER held {trigger} EXECUTE FUNCTION public.first_life_sleep('120')",
        )
        for marker in ("go1", "go2"):  # the hold worker's tool and model go on
            (tmp_path / marker).touch()
        wait_until(
            lambda: (
                q(
                    cluster.url,
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' "
                    "AND position(%s in query) > 0",
                    table,
                )[0][0]
                > 0
            ),
            app,
            err,
        )
        cluster.crash_restart(down_seconds=1.0)
        out, _ = app.communicate(timeout=180)
    finally:
        if app.poll() is None:
            app.kill()
    result = json.loads(out.strip().splitlines()[-1])
    assert result == {"status": "completed", "error": None}, err.read_text()[-3000:]
    session_id, run_id = json.loads((tmp_path / "run.json").read_text())
    row = q(
        cluster.url,
        "SELECT r.status, w.status FROM helix.runs r JOIN dbos.workflow_status w "
        "ON w.workflow_uuid = r.workflow_id WHERE r.run_id = %s",
        run_id,
    )
    assert row == [("completed", "SUCCESS")], row
    roles = q(
        cluster.url,
        "SELECT role, content FROM helix.messages WHERE session_id = %s ORDER BY seq",
        session_id,
    )
    assert [r[0] for r in roles] == ["user", "assistant", "tool", "assistant"], roles
    assert roles[-1][1] == "all done", roles


def wait_until(done: Any, app: subprocess.Popen[str], err: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert app.poll() is None, err.read_text()[-3000:]
        assert time.monotonic() < deadline, err.read_text()[-3000:]
        time.sleep(0.05)


def restarts_of(kind: list[str]) -> list[str]:
    if not RESTARTS:
        return kind
    return [kind[i % len(kind)] for i in range(RESTARTS)]


def test_fast_restart(cluster: Cluster, tmp_path: Path) -> None:
    """(a) `pg_ctl restart -m fast` under in-flight runs, every wait for a human parked."""
    fleet = Fleet(cluster.url, tmp_path, park_every_wait=True)
    figures = outage(cluster, fleet, restarts_of(["fast"]), seed=int(time.time()))
    log = (tmp_path / "worker.err").read_text()
    assert "run.parked" in log and "run.unparked" in log
    print("\ndatabase fast restart:", json.dumps(figures, sort_keys=True))


def test_two_crash_restarts(cluster: Cluster, tmp_path: Path) -> None:
    """(b) `pg_ctl stop -m immediate` and start, twice, a few seconds apart."""
    fleet = Fleet(cluster.url, tmp_path)
    figures = outage(cluster, fleet, restarts_of(["crash", "crash"]), seed=int(time.time()))
    print("\ndatabase crash restarts:", json.dumps(figures, sort_keys=True))
