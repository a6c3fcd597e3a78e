"""Crash safety: SIGKILL a real process mid-run, relaunch it, and check the rows.

After relaunch the run completes by itself; a tool whose step had completed
is not run again; the transcript has no duplicate and no unanswered tool call;
the usage table has no duplicate row.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import forkserver
import pytest
from helpers import lines, sql, wait_for

from helix_dbos.store.database import libpq_url

APP = Path(__file__).parent / "apps" / "crash_app.py"
pytestmark = pytest.mark.crash


def spawn(
    mode: str,
    database_url: str,
    executor: str,
    scenario: str,
    markers: Path,
    *extra: str,
    env: dict | None = None,
) -> subprocess.Popen:
    # Each process's stderr goes to a file beside the markers, for a failing test to show.
    stderr = open(markers / f"stderr-{mode}-{time.monotonic_ns()}.log", "w")  # noqa: SIM115
    return forkserver.Popen(
        [sys.executable, str(APP), mode, database_url, executor, scenario, str(markers), *extra],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env={**os.environ, **(env or {})},
    )


def start_run(
    database_url: str, scenario: str, markers: Path, env: dict | None = None
) -> tuple[subprocess.Popen, str, str, str]:
    executor = f"crash-{scenario}-{uuid.uuid4().hex[:8]}"
    proc = spawn("start", database_url, executor, scenario, markers, env=env)
    assert proc.stdout is not None
    started = json.loads(proc.stdout.readline())
    return proc, executor, started["run_id"], started["session_id"]


def relaunch(
    database_url: str,
    executor: str,
    scenario: str,
    markers: Path,
    run_id: str,
    env: dict | None = None,
) -> dict:
    proc = spawn("recover", database_url, executor, scenario, markers, run_id, env=env)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    return json.loads(out.strip().splitlines()[-1])


def _stderr_of(markers: Path, mode: str) -> str:
    return "".join(p.read_text() for p in markers.glob(f"stderr-{mode}-*.log"))


def sigkill(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def assert_transcript_is_clean(database_url: str, session_id: str, run_id: str) -> list[tuple]:
    rows = sql(
        database_url,
        "SELECT seq, role, tool_calls, tool_call_id FROM helix.messages WHERE session_id = %s ORDER BY seq",
        session_id,
    )
    seqs = [r[0] for r in rows]
    assert seqs == list(range(1, len(rows) + 1)), "no gaps and no duplicates"
    call_ids = [c["id"] for r in rows if r[2] for c in r[2]]
    result_ids = [r[3] for r in rows if r[1] == "tool"]
    assert sorted(call_ids) == sorted(result_ids), "every tool call has exactly one result"
    assert len(result_ids) == len(set(result_ids))
    usage = sql(
        database_url, "SELECT usage_id, kind, tool_name FROM helix.usage WHERE run_id = %s", run_id
    )
    assert len(usage) == len({u[0] for u in usage})
    return rows


def test_kill_during_a_tool_call(database_url, tmp_path):
    proc, executor, run_id, session_id = start_run(database_url, "tool", tmp_path)
    wait_for(lambda: (tmp_path / "in_slow_b").exists())
    sigkill(proc)
    assert lines(tmp_path, "record_a.log") == ["one"]

    # The relaunched process runs edited code; the explicit application version still matches.
    outcome = relaunch(
        database_url, executor, "tool", tmp_path, run_id, env={"HELIX_CODE_EDIT": "1"}
    )

    assert outcome["status"] == "completed", outcome
    assert outcome["output"] == {"summary": "2 results"}
    assert lines(tmp_path, "record_a.log") == ["one"], "a completed tool step is not run again"
    assert lines(tmp_path, "slow_b.log") == ["two", "two"], "the interrupted call runs again"
    assert len(lines(tmp_path, "llm.log")) == 3, "no LLM call is repeated"
    rows = assert_transcript_is_clean(database_url, session_id, run_id)
    assert [r[1] for r in rows] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]
    kinds = sql(
        database_url,
        "SELECT kind, count(*) FROM helix.usage WHERE run_id = %s GROUP BY kind ORDER BY kind",
        run_id,
    )
    assert kinds == [("llm", 3), ("tool", 2)]


def test_kill_after_a_step_was_written_but_before_the_next_llm_step_was_checkpointed(
    database_url, tmp_path
):
    """Step 1's rows are written by LLM step 2, whose model call is killed: the replayed
    LLM step finds them written (runs.committed_step) and writes nothing twice."""
    proc, executor, run_id, session_id = start_run(database_url, "written", tmp_path)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert (tmp_path / "crashed_in_model_call").exists()
    assert sql(
        database_url,
        "SELECT role FROM helix.messages WHERE session_id = %s ORDER BY seq",
        session_id,
    ) == [("user",), ("assistant",), ("tool",)], "step 1 was written before the model call"
    assert sql(database_url, "SELECT committed_step FROM helix.runs WHERE run_id = %s", run_id) == [
        (1,)
    ]

    outcome = relaunch(database_url, executor, "written", tmp_path, run_id)

    assert outcome["status"] == "completed", outcome
    assert lines(tmp_path, "record_a.log") == ["one"]
    assert len(lines(tmp_path, "llm.log")) == 3, "the unfinished LLM step ran again, once"
    rows = assert_transcript_is_clean(database_url, session_id, run_id)
    assert [r[1] for r in rows] == ["user", "assistant", "tool", "assistant", "tool"]
    assert sql(database_url, "SELECT count(*) FROM helix.usage WHERE run_id = %s", run_id) == [(3,)]
    assert sql(
        database_url,
        "SELECT count(*), count(DISTINCT chunk_key) FROM helix.stream_events WHERE run_id = %s "
        "AND type = 'tool_end'",
        run_id,
    ) == [(1, 1)]


def test_kill_after_the_final_commit_before_its_checkpoint(database_url, tmp_path):
    """The final step's transaction committed, its checkpoint did not: the replayed step
    finds the rows written and the run ended, and changes nothing."""
    proc, executor, run_id, session_id = start_run(database_url, "final", tmp_path)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert (tmp_path / "crashed_after_final_commit").exists()
    assert sql(database_url, "SELECT status FROM helix.runs WHERE run_id = %s", run_id) == [
        ("completed",)
    ]

    outcome = relaunch(database_url, executor, "final", tmp_path, run_id)

    assert outcome["status"] == "completed", outcome
    assert outcome["output"] == {"summary": "1 results"}
    assert lines(tmp_path, "record_a.log") == ["one"]
    assert len(lines(tmp_path, "llm.log")) == 2, "both LLM steps were checkpointed"
    rows = assert_transcript_is_clean(database_url, session_id, run_id)
    assert [r[1] for r in rows] == ["user", "assistant", "tool", "assistant", "tool"]
    assert sql(database_url, "SELECT count(*) FROM helix.usage WHERE run_id = %s", run_id) == [(3,)]
    assert sql(
        database_url,
        "SELECT type, count(*) FROM helix.stream_events WHERE run_id = %s "
        "AND type IN ('output', 'run_completed', 'tool_end') GROUP BY type ORDER BY type",
        run_id,
    ) == [("output", 1), ("run_completed", 1), ("tool_end", 1)]


def test_kill_after_an_early_final_write_before_its_llm_steps_checkpoint(
    helix, database_url, tmp_path
):
    """A run's last step is written while DBOS checkpoints its LLM step. Here the
    checkpoint is held (a trigger) and the process dies once the final write committed.
    The recovered LLM step finds the run ended and asks the model nothing (a model asked
    again would call a tool here): the row, the transcript and the workflow's result all
    keep the first life's output, and nothing runs after the run's end."""
    hold = "crash_hold_llm_checkpoint"
    sql(
        database_url,
        f"CREATE FUNCTION helix.{hold}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "IF NEW.function_name = 'helix.llm' AND EXISTS (SELECT 1 FROM helix.runs r "
        "JOIN helix.messages m ON m.run_id = r.run_id WHERE r.workflow_id = NEW.workflow_uuid "
        "AND m.content = 'scenario early') THEN PERFORM pg_sleep(30); END IF; "
        "RETURN NEW; END $$",
    )
    sql(
        database_url,
        f"CREATE TRIGGER {hold} BEFORE INSERT ON dbos.operation_outputs "
        f"FOR EACH ROW EXECUTE FUNCTION helix.{hold}()",
    )
    try:
        proc, executor, run_id, session_id = start_run(database_url, "early", tmp_path)
        proc.wait(timeout=60)
    finally:
        sql(  # the held checkpoint's backend outlives its client: end it and its locks
            database_url,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
            "datname = current_database() AND pid <> pg_backend_pid() "
            "AND query LIKE '%operation_outputs%' AND wait_event = 'PgSleep'",
        )
        sql(database_url, f"DROP TRIGGER {hold} ON dbos.operation_outputs")
        sql(database_url, f"DROP FUNCTION helix.{hold}()")
    assert proc.returncode == -signal.SIGKILL
    assert (tmp_path / "crashed_after_early_final").exists()
    first = {"summary": "first life"}
    assert sql(
        database_url, "SELECT status, output::jsonb FROM helix.runs WHERE run_id = %s", run_id
    ) == [("completed", first)]
    assert sql(
        database_url,
        "SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = %s",
        f"helix-{run_id}",
    ) == [(0,)], "the LLM step's checkpoint never committed"

    outcome = relaunch(database_url, executor, "early", tmp_path, run_id)

    assert (outcome["status"], outcome["output"]) == ("completed", first)
    assert outcome["workflow"] == {"status": "completed", "output": first}, outcome
    assert len(lines(tmp_path, "llm.log")) == 1, "the model was asked again"
    assert lines(tmp_path, "record_a.log") == [], "a tool ran after the run's end"
    rows = assert_transcript_is_clean(database_url, session_id, run_id)
    assert [r[1] for r in rows] == ["user", "assistant", "tool"]
    assert sql(database_url, "SELECT count(*) FROM helix.usage WHERE run_id = %s", run_id) == [(1,)]
    assert sql(
        database_url,
        "SELECT type, count(*) FROM helix.stream_events WHERE run_id = %s "
        "AND type IN ('output', 'run_completed') GROUP BY type ORDER BY type",
        run_id,
    ) == [("output", 1), ("run_completed", 1)]


def test_kill_between_the_llm_step_and_the_commit(database_url, tmp_path):
    proc, executor, run_id, session_id = start_run(database_url, "commit", tmp_path)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert (tmp_path / "crashed_before_commit").exists()
    assert sql(
        database_url, "SELECT count(*) FROM helix.messages WHERE session_id = %s", session_id
    ) == [(1,)]

    outcome = relaunch(database_url, executor, "commit", tmp_path, run_id)

    assert outcome["status"] == "completed", outcome
    assert lines(tmp_path, "record_a.log") == ["one"], (
        "the tool step was checkpointed before the crash"
    )
    assert len(lines(tmp_path, "llm.log")) == 2, (
        "the checkpointed LLM step is replayed, not called again"
    )
    rows = assert_transcript_is_clean(database_url, session_id, run_id)
    assert [r[1] for r in rows] == ["user", "assistant", "tool", "assistant", "tool"]
    assert sql(database_url, "SELECT count(*) FROM helix.usage WHERE run_id = %s", run_id) == [(3,)]


def test_kill_during_a_batch_of_parallel_tool_calls(database_url, tmp_path):
    proc, executor, run_id, session_id = start_run(database_url, "parallel", tmp_path)
    workflow_id = f"helix-{run_id}"
    wait_for(lambda: (tmp_path / "in_slow_b").exists())
    wait_for(
        lambda: (
            sql(
                database_url,
                "SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = %s AND function_name = 'helix.tool:fast'",
                workflow_id,
            )
            == [(3,)]
        )
    )
    sigkill(proc)

    outcome = relaunch(database_url, executor, "parallel", tmp_path, run_id)

    assert outcome["status"] == "completed", outcome
    for i in (0, 1, 3):
        assert len(lines(tmp_path, f"fast_{i}.log")) == 1, f"fast {i} ran once"
    assert lines(tmp_path, "slow_b.log") == ["p", "p"]
    rows = assert_transcript_is_clean(database_url, session_id, run_id)
    tool_ids = [r[3] for r in rows if r[1] == "tool"]
    assert tool_ids == ["p0", "p1", "p2", "p3", "fin"], "results keep the call order"


@pytest.mark.parametrize("parked", [False, True], ids=["in_memory", "parked"])
def test_kill_while_waiting_for_approval_then_approve_after_relaunch(
    database_url, tmp_path, parked
):
    # parked: the wait let go of its coroutine first (`wait_parking.py`, swept every 5 s)
    env = {"CRASH_APP_PARK_AFTER": "0"} if parked else None
    proc, executor, run_id, session_id = start_run(database_url, "approval", tmp_path, env)
    wait_for(
        lambda: (
            sql(database_url, "SELECT status FROM helix.runs WHERE run_id = %s", run_id)
            == [("waiting",)]
        )
    )
    if parked:
        wait_for(lambda: "parked" in _stderr_of(tmp_path, "start"), timeout=30)
    sigkill(proc)
    assert sql(
        database_url, "SELECT tool_call_id, status FROM helix.tool_calls WHERE run_id = %s", run_id
    ) == [("g1", "pending")]

    recovering = spawn("recover", database_url, executor, "approval", tmp_path, run_id)
    workflow_id = sql(database_url, "SELECT workflow_id FROM helix.runs WHERE run_id = %s", run_id)[
        0
    ][0]
    script = (
        "import sys; from dbos import DBOSClient\n"
        "c = DBOSClient(system_database_url=sys.argv[1])\n"
        "c.send(sys.argv[2], {'tool_call_id': 'g1', 'approved': True}, 'helix.approval')\n"
        "c.destroy()\n"
    )
    sender = forkserver.run(
        [sys.executable, "-c", script, libpq_url(database_url), workflow_id],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert sender.returncode == 0, sender.stderr
    out, _ = recovering.communicate(timeout=120)
    outcome = json.loads(out.strip().splitlines()[-1])

    assert outcome["status"] == "completed", outcome
    assert lines(tmp_path, "guarded_delete.log") == ["/data/old"], (
        "the approved tool ran exactly once"
    )
    assert sql(database_url, "SELECT status FROM helix.tool_calls WHERE run_id = %s", run_id) == [
        ("approved",)
    ]
    assert_transcript_is_clean(database_url, session_id, run_id)


def test_a_database_restart_mid_run_loses_nothing(tmp_path):
    """PostgreSQL restarts while a tool runs; the run reconnects and completes in the same process."""
    pgserver = pytest.importorskip("pgserver")
    from pgserver._commands import pg_ctl  # noqa: PLC0415 - optional: after importorskip

    server = pgserver.get_server(tmp_path / "pg", cleanup_mode=None)
    database_url = server.get_uri()
    markers = tmp_path / "markers"
    markers.mkdir()
    try:
        proc = spawn("run", database_url, f"restart-{uuid.uuid4().hex[:6]}", "restart", markers)
        assert proc.stdout is not None
        started = json.loads(proc.stdout.readline())
        wait_for(lambda: (markers / "in_slow_b").exists())
        booted = sql(database_url, "SELECT pg_postmaster_start_time()")
        pg_ctl(
            ["-w", "restart", "-m", "fast"],
            pgdata=server.pgdata,
            user=server.system_user,
            timeout=60,
        )
        assert sql(database_url, "SELECT pg_postmaster_start_time()") != booted
        (markers / "release").touch()
        out, _ = proc.communicate(timeout=120)
        outcome = json.loads(out.strip().splitlines()[-1])

        assert outcome["status"] == "completed", outcome
        assert lines(markers, "record_a.log") == ["one"] and lines(markers, "slow_b.log") == ["two"]
        assert_transcript_is_clean(database_url, started["session_id"], started["run_id"])
    finally:
        pg_ctl(
            ["-w", "stop", "-m", "immediate"],
            pgdata=server.pgdata,
            user=server.system_user,
            timeout=60,
        )


def test_kill_between_opening_a_run_and_starting_its_workflow(database_url, tmp_path):
    """The run's row is committed, its workflow never started: the relaunched process
    closes it as failed (so `result()` returns), and the session takes a new run."""
    executor = f"crash-open-{uuid.uuid4().hex[:8]}"
    proc = spawn("start", database_url, executor, "open", tmp_path)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    run_id = lines(tmp_path, "opened")[0]
    assert sql(database_url, "SELECT status FROM helix.runs WHERE run_id = %s", run_id) == [
        ("running",)
    ]

    outcome = relaunch(database_url, executor, "open", tmp_path, run_id)

    assert outcome["status"] == "failed", outcome
    assert outcome["error"] == "Run never started"
    workflows = sql(
        database_url,
        "SELECT count(*) FROM dbos.workflow_status WHERE workflow_uuid = %s",
        f"helix-{run_id}",
    )
    assert workflows == [(0,)]
    (session_id,) = sql(
        database_url, "SELECT session_id FROM helix.runs WHERE run_id = %s", run_id
    )[0]
    assert sql(
        database_url, "SELECT status FROM helix.sessions WHERE session_id = %s", session_id
    ) == [("failed",)]
    assert lines(tmp_path, "llm.log") == [], "nothing of the run was executed"


def test_a_run_whose_agent_no_live_worker_serves_waits_for_one(database_url, tmp_path):
    """A process without the run's agent relaunches under the killed worker's id: the run
    is handed to its agent's queue and waits there (it is never failed for that); a worker
    that serves the agent, under another id, picks it up and completes it."""
    proc, executor, run_id, session_id = start_run(database_url, "tool", tmp_path)
    wait_for(lambda: (tmp_path / "in_slow_b").exists())
    sigkill(proc)
    workflow_id = f"helix-{run_id}"

    without = spawn(
        "serve",
        database_url,
        executor,
        "tool",
        tmp_path,
        env={"CRASH_APP_WITHOUT_AGENT": "1", "CRASH_APP_RECONCILE_SECONDS": "0.5"},
    )
    try:
        assert without.stdout is not None
        json.loads(without.stdout.readline())
        queued = "SELECT status, queue_name FROM dbos.workflow_status WHERE workflow_uuid = %s"
        wait_for(
            lambda: (
                sql(database_url, queued, workflow_id) == [("ENQUEUED", "helix.agent.crash_agent")]
            )
        )
        time.sleep(2)  # several reconciliations and queue polls later, it still waits
        assert sql(database_url, queued, workflow_id) == [("ENQUEUED", "helix.agent.crash_agent")]
        assert sql(database_url, "SELECT status FROM helix.runs WHERE run_id = %s", run_id) == [
            ("running",)
        ]
        assert lines(tmp_path, "slow_b.log") == ["two"], "nothing ran while it waited"

        outcome = relaunch(database_url, f"{executor}-b", "tool", tmp_path, run_id)
    finally:
        without.kill()
        without.wait(timeout=30)

    assert outcome["status"] == "completed", outcome
    assert lines(tmp_path, "record_a.log") == ["one"], "a completed tool step is not run again"
    assert_transcript_is_clean(database_url, session_id, run_id)
    assert sql(
        database_url,
        "SELECT executor_id FROM dbos.workflow_status WHERE workflow_uuid = %s",
        workflow_id,
    ) == [(f"{executor}-b",)]


def test_kill_mid_run_with_a_pdf_in_the_input(database_url, tmp_path):
    """Content parts (issue 49): the PDF's bytes are in `helix.blobs` before the run opens;
    a process killed during a tool call is relaunched with nothing in memory, reads them
    back from SQL for its next model call, completes, and the PDF is stored once."""
    proc, executor, run_id, session_id = start_run(database_url, "pdf", tmp_path)
    wait_for(lambda: (tmp_path / "in_slow_b").exists())
    sigkill(proc)
    pdf_sha = sql(database_url, "SELECT parts -> 0 ->> 'sha256' FROM helix.messages WHERE session_id = %s AND seq = 1", session_id)[0][0]  # fmt: skip
    assert lines(tmp_path, "pdf_seen.log") == [pdf_sha, pdf_sha]

    outcome = relaunch(database_url, executor, "pdf", tmp_path, run_id)

    assert outcome["status"] == "completed", outcome
    assert outcome["output"] == {"summary": "2 results"}
    # The relaunched process's one model call got the very bytes, read from SQL.
    assert lines(tmp_path, "pdf_seen.log") == [pdf_sha] * 3
    assert lines(tmp_path, "record_a.log") == ["one"], "a completed tool step is not run again"
    assert_transcript_is_clean(database_url, session_id, run_id)
    assert sql(database_url, "SELECT count(*), sum(size) FROM helix.blobs") == [(1, 9 + 32 * 8192)]
    outputs = sql(
        database_url,
        "SELECT max(octet_length(output)) FROM dbos.operation_outputs WHERE workflow_uuid = %s",
        f"helix-{run_id}",
    )[0][0]
    assert outputs < 8 * 1024, "no step output carries the PDF"
