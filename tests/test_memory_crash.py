"""Memory across SIGKILL (real processes): nothing saved is lost, nothing is embedded
twice, and prompt recall injects the same memories when a step runs again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import forkserver
import pytest
from helpers import lines, require_pgvector, sql, wait_for

pytestmark = pytest.mark.crash
APP = Path(__file__).parent / "apps" / "memory_app.py"


@pytest.fixture(autouse=True)
def _pgvector(database_url: str) -> None:
    require_pgvector(database_url)


def spawn(mode: str, database_url: str, executor: str, markers: Path, *extra: str):
    stderr = open(markers / f"stderr-{mode}-{time.monotonic_ns()}.log", "w")  # noqa: SIM115
    return forkserver.Popen(
        [sys.executable, str(APP), mode, database_url, executor, str(markers), *extra],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env=dict(os.environ),
    )


def sigkill(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait(timeout=30)


def test_sigkill_during_background_embedding_loses_nothing_and_embeds_once(database_url, tmp_path):
    executor = f"mem-crash-{uuid.uuid4().hex[:8]}"
    proc = spawn("save", database_url, executor, tmp_path)
    assert proc.stdout is not None
    saved = json.loads(proc.stdout.readline())["saved"]
    wait_for(lambda: (tmp_path / "embedding").exists())  # a batch is being embedded
    sigkill(proc)
    rows = sql(
        database_url,
        "SELECT memory_id, embedding_status FROM helix.memories ORDER BY created_at",
    )
    assert [r[0] for r in rows] == saved, "every saved memory is there, once"
    assert {r[1] for r in rows} == {"pending"}

    again = spawn("embed", database_url, f"{executor}-2", tmp_path)
    out, _ = again.communicate(timeout=120)
    assert again.returncode == 0, out
    assert json.loads(out.strip().splitlines()[-1]) == {"embedded": 20, "pending": 0}
    embedded = lines(tmp_path, "embedded.log")
    assert sorted(embedded) == sorted(f"crash memory number {i} about tea" for i in range(20))
    assert sql(
        database_url,
        "SELECT count(*), count(embedding) FROM helix.memories WHERE embedding_status = 'complete'",
    ) == [(20, 20)]

    third = spawn("embed", database_url, f"{executor}-3", tmp_path)
    out, _ = third.communicate(timeout=120)
    assert json.loads(out.strip().splitlines()[-1]) == {"embedded": 0, "pending": 0}
    assert len(lines(tmp_path, "embedded.log")) == 20, "nothing embedded a second time"


def test_prompt_recall_injects_the_same_memories_after_a_crash(database_url, tmp_path):
    executor = f"mem-inject-{uuid.uuid4().hex[:8]}"
    proc = spawn("inject-start", database_url, executor, tmp_path)
    assert proc.stdout is not None
    run_id = json.loads(proc.stdout.readline())["run_id"]
    wait_for(lambda: proc.poll() is not None)  # the model call killed it
    first = lines(tmp_path, "prompts.log")
    assert len(first) == 1
    injected = json.loads(first[0])
    assert "- The user drinks oolong tea" in injected

    # While the process is down, a memory that matches the question better arrives.
    sql(
        database_url,
        "INSERT INTO helix.memories (memory_id, resource_id, text) VALUES "
        "('mem_late', 'crash-user', 'Which tea does the user drink? The user drinks puerh tea')",
    )
    relaunched = spawn("inject-recover", database_url, executor, tmp_path, run_id)
    out, _ = relaunched.communicate(timeout=180)
    assert relaunched.returncode == 0, out
    assert json.loads(out.strip().splitlines()[-1])["status"] == "completed"
    prompts = lines(tmp_path, "prompts.log")
    assert len(prompts) == 2, "the step ran again after the crash"
    assert prompts[1] == prompts[0], "the same memories, with the same text"
    assert "puerh" not in json.loads(prompts[1])
    recorded = sql(
        database_url, "SELECT step, memories FROM helix.memory_recalls WHERE run_id = %s", run_id
    )
    assert len(recorded) == 1 and [m["text"] for m in recorded[0][1]] == [
        line[2:] for line in injected.splitlines() if line.startswith("- ")
    ]
    # A fresh search would have picked the late memory: the replay did not search again.
    found = sql(
        database_url,
        "SELECT memory_id FROM helix.memories WHERE resource_id = 'crash-user' "
        "AND search @@ plainto_tsquery('english', 'puerh')",
    )
    assert found == [("mem_late",)]


@pytest.mark.parametrize(
    ("step", "status_at_kill"),
    [("helix.memory.save", "pending"), ("helix.memory.embed", "complete")],
)
def test_a_kill_between_a_memory_steps_commit_and_its_checkpoint_writes_once(
    database_url, tmp_path, step, status_at_kill
):
    """`__remember__`'s save (or embed) step commits its row; DBOS's record of the step
    is held (a trigger) and the process is killed. The step runs again on recovery: it
    meets the row its first life wrote (the id is the step's), so there is one memory,
    embedded once, and the run's recall finds it once."""
    hold = "memory_crash_hold_checkpoint"
    sql(
        database_url,
        f"CREATE FUNCTION helix.{hold}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"IF NEW.function_name = '{step}' THEN PERFORM pg_sleep(60); END IF; "
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
    executor = f"mem-save-{uuid.uuid4().hex[:8]}"
    try:
        proc = spawn("remember-start", database_url, executor, tmp_path)
        assert proc.stdout is not None
        run_id = json.loads(proc.stdout.readline())["run_id"]
        wait_for(lambda: sql(database_url, held))  # the rows committed, the record waits
        sigkill(proc)
    finally:
        sql(database_url, f"SELECT pg_terminate_backend(pid) FROM ({held}) h")
        sql(database_url, f"DROP TRIGGER {hold} ON dbos.operation_outputs")
        sql(database_url, f"DROP FUNCTION helix.{hold}()")
    workflow = f"helix-{run_id}"
    assert sql(
        database_url,
        "SELECT text, embedding_status FROM helix.memories WHERE resource_id = 'crash-user'",
    ) == [("The user drinks oolong tea", status_at_kill)], "the step committed before the kill"
    assert sql(
        database_url,
        "SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = %s "
        "AND function_name = %s",
        workflow,
        step,
    ) == [(0,)], "the step's record never committed"

    relaunched = spawn("remember-recover", database_url, executor, tmp_path, run_id)
    out, _ = relaunched.communicate(timeout=180)
    assert relaunched.returncode == 0, out
    end = json.loads(out.strip().splitlines()[-1])
    assert end["status"] == "completed", end
    rows = sql(
        database_url,
        "SELECT memory_id, embedding_status FROM helix.memories WHERE resource_id = 'crash-user'",
    )
    assert len(rows) == 1, f"saved once, not {len(rows)} times: {rows}"
    assert rows[0][1] == "complete", "the one memory is embedded, none left pending"
    embedded = lines(tmp_path, "embedded.log")  # the memory, and the recall's query
    assert embedded.count("The user drinks oolong tea") == 1, f"embedded once: {embedded}"
    recalled = json.loads(end["output"])["memories"]
    assert [(m["memory_id"], m["text"]) for m in recalled] == [
        (rows[0][0], "The user drinks oolong tea")
    ], "the run's recall finds the memory once"
    assert sql(
        database_url,
        "SELECT function_name, count(*) FROM dbos.operation_outputs WHERE workflow_uuid = %s "
        "AND function_name LIKE 'helix.memory.%%' GROUP BY function_name ORDER BY 1",
        workflow,
    ) == [("helix.memory.embed", 1), ("helix.memory.save", 1)]
