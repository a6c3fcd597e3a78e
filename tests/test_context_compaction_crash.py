"""Context compaction across SIGKILL (real processes): a summary step killed after its
row committed, or inside its model call, leaves exactly one summary, and the run
completes on top of it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import forkserver
import pytest
from helpers import lines, sql, wait_for

pytestmark = pytest.mark.crash
APP = Path(__file__).parent / "apps" / "compaction_app.py"


def spawn(mode: str, database_url: str, executor: str, markers: Path, *extra: str):
    stderr = open(markers / f"stderr-{mode}-{time.monotonic_ns()}.log", "w")  # noqa: SIM115
    return forkserver.Popen(
        [sys.executable, str(APP), mode, database_url, executor, str(markers), *extra],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env=dict(os.environ),
    )


def read_run_ids(proc: subprocess.Popen, run_ids: list[str]) -> None:
    """Collect the run ids the app prints, one per turn (a thread: reads block)."""
    assert proc.stdout is not None
    for line in proc.stdout:
        run_ids.append(json.loads(line).get("run_id", ""))


def sigkill(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait(timeout=30)


def recover(database_url: str, executor: str, markers: Path, run_id: str) -> dict[str, str]:
    relaunched = spawn("recover", database_url, executor, markers, run_id)
    out, _ = relaunched.communicate(timeout=180)
    assert relaunched.returncode == 0, out
    return json.loads(out.strip().splitlines()[-1])


def summary_checkpoints(database_url: str, run_id: str) -> list[tuple[int]]:
    return sql(
        database_url,
        "SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = %s "
        "AND function_name = 'helix.summary'",
        f"helix-{run_id}",
    )


def test_a_kill_between_the_summary_row_and_its_checkpoint_leaves_one_summary(
    database_url, tmp_path
):
    hold = "compaction_crash_hold_checkpoint"
    sql(
        database_url,
        f"CREATE FUNCTION helix.{hold}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "IF NEW.function_name = 'helix.summary' THEN PERFORM pg_sleep(60); END IF; "
        "RETURN NEW; END $$",
    )
    sql(
        database_url,
        f"CREATE TRIGGER {hold} BEFORE INSERT ON dbos.operation_outputs "
        f"FOR EACH ROW EXECUTE FUNCTION helix.{hold}()",
    )
    held = (
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid() AND query LIKE '%operation_outputs%' "
        "AND wait_event = 'PgSleep'"
    )
    executor = f"compact-hold-{uuid.uuid4().hex[:8]}"
    run_ids: list[str] = []
    proc = spawn("start-hold", database_url, executor, tmp_path)
    try:
        reader = threading.Thread(target=read_run_ids, args=(proc, run_ids), daemon=True)
        reader.start()
        wait_for(lambda: sql(database_url, held), timeout=120)  # the row is in, the record waits
        sigkill(proc)
    finally:
        if proc.poll() is None:
            sigkill(proc)
        sql(database_url, f"SELECT pg_terminate_backend(pid) FROM ({held}) h")
        sql(database_url, f"DROP TRIGGER {hold} ON dbos.operation_outputs")
        sql(database_url, f"DROP FUNCTION helix.{hold}()")
    reader.join(timeout=10)
    run_id = run_ids[-1]
    first_pid = lines(tmp_path, "summaries.log")
    assert len(first_pid) == 1, "one summary asked before the kill"
    rows = sql(database_url, "SELECT text, run_id FROM helix.summaries")
    assert rows == [(f"summary by {first_pid[0]}", run_id)], "the row committed before the kill"
    assert summary_checkpoints(database_url, run_id) == [(0,)], "its record never committed"

    end = recover(database_url, executor, tmp_path, run_id)
    assert end["status"] == "completed", end
    assert sql(database_url, "SELECT text FROM helix.summaries") == [
        (f"summary by {first_pid[0]}",)
    ], "one summary, the first one"
    assert lines(tmp_path, "summaries.log") == first_pid, "the model was not asked again"
    assert sql(
        database_url, "SELECT count(*) FROM helix.usage WHERE usage_id LIKE %s", "%:summary:%"
    ) == [(1,)], "one usage row for the one summary call"
    assert summary_checkpoints(database_url, run_id) == [(1,)]
    prompt = json.loads(lines(tmp_path, "prompts.log")[-1])
    assert f"summary by {first_pid[0]}" in prompt, "the run went on on top of that summary"
    turns = len(run_ids)
    assert sql(
        database_url, "SELECT count(*) FROM helix.messages WHERE session_id = %s", end["session_id"]
    ) == [(2 * turns,)], "the whole transcript is kept"


def test_a_kill_inside_the_summary_call_leaves_one_summary(database_url, tmp_path):
    executor = f"compact-kill-{uuid.uuid4().hex[:8]}"
    proc = spawn("start-kill", database_url, executor, tmp_path)
    run_ids: list[str] = []
    try:
        read_run_ids(proc, run_ids)  # until it died
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            sigkill(proc)
    assert proc.returncode == -signal.SIGKILL
    assert len(lines(tmp_path, "summaries.log")) == 1
    assert sql(database_url, "SELECT count(*) FROM helix.summaries") == [(0,)]

    end = recover(database_url, executor, tmp_path, run_ids[-1])
    assert end["status"] == "completed", end
    asked = lines(tmp_path, "summaries.log")
    assert len(asked) == 2 and asked[0] != asked[1], "asked again by the relaunched process"
    assert sql(database_url, "SELECT text FROM helix.summaries") == [(f"summary by {asked[1]}",)]
    assert summary_checkpoints(database_url, run_ids[-1]) == [(1,)]
