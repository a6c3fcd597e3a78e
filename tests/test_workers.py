"""Many workers on one database: real processes (tests/apps/crash_app.py), SIGKILL and SIGSTOP.

Each worker holds a lease in helix.workers (4 s in crash_app); a live worker claims a
lapsed one and hands its runs back to the queues, and a worker that could not renew its
lease stops executing before anyone may claim it.
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
import psycopg
import pytest
from helpers import lines, sql, wait_for
from tcp_proxy import CuttableProxy
from test_crash import (
    APP,
    assert_transcript_is_clean,
    relaunch,
    sigkill,
    spawn,
)

from helix_dbos.runtime.dbos import worker_workflows
from helix_dbos.store.database import libpq_url
from helix_dbos.store.features import workers as workers_sql
from helix_dbos.store.migrations import apply_migrations

pytestmark = pytest.mark.crash
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def executor_of(database_url: str, proc: subprocess.Popen) -> str:
    rows: list = []

    def registered() -> bool:
        rows[:] = sql(
            database_url,
            "SELECT executor_id FROM helix.workers WHERE pid = %s AND state = 'live'",
            proc.pid,
        )
        return len(rows) == 1

    wait_for(registered)
    return rows[0][0]


def run_status(database_url: str, run_id: str) -> str:
    return sql(database_url, "SELECT status FROM helix.runs WHERE run_id = %s", run_id)[0][0]


def workflow_row(database_url: str, run_id: str) -> tuple:
    return sql(
        database_url,
        "SELECT status, executor_id FROM dbos.workflow_status WHERE workflow_uuid = %s",
        f"helix-{run_id}",
    )[0]


def worker_state(database_url: str, executor_id: str) -> str:
    return sql(database_url, "SELECT state FROM helix.workers WHERE executor_id = %s", executor_id)[
        0
    ][0]


def transcript_counts(database_url: str, session_id: str) -> tuple:
    """Messages, usage rows and chunks of a session: what a late write would add to."""
    return sql(
        database_url,
        "SELECT (SELECT count(*) FROM helix.messages WHERE session_id = %s), "
        "(SELECT count(*) FROM helix.usage WHERE session_id = %s), "
        "(SELECT count(*) FROM helix.stream_chunks WHERE session_id = %s)",
        session_id,
        session_id,
        session_id,
    )[0]


def stop(*procs: subprocess.Popen | None) -> None:
    """Kill what a test started (a stopped process is woken first, so it can die)."""
    for proc in procs:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait(timeout=30)


def started(proc: subprocess.Popen) -> dict:
    assert proc.stdout is not None
    return json.loads(proc.stdout.readline())


def approve(database_url: str, run_id: str, tool_call_id: str) -> None:
    script = (
        "import sys; from dbos import DBOSClient\n"
        "c = DBOSClient(system_database_url=sys.argv[1])\n"
        "c.send(sys.argv[2], {'tool_call_id': sys.argv[3], 'approved': True}, 'helix.approval')\n"
        "c.destroy()\n"
    )
    sender = forkserver.run(
        [sys.executable, "-c", script, libpq_url(database_url), f"helix-{run_id}", tool_call_id],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert sender.returncode == 0, sender.stderr


def test_two_processes_with_default_settings_never_touch_each_others_runs(database_url, tmp_path):
    a_marks, b_marks = tmp_path / "a", tmp_path / "b"
    a_marks.mkdir()
    b_marks.mkdir()
    a = spawn("start", database_url, "-", "approval", a_marks)
    b = None
    try:
        run_id = started(a)["run_id"]
        wait_for(lambda: run_status(database_url, run_id) == "waiting")
        a_id = executor_of(database_url, a)

        b = spawn("serve", database_url, "-", "approval", b_marks)
        b_id = started(b)["ready"]
        assert b_id != a_id, "each process gets its own executor id"
        time.sleep(3)  # B's startup, heartbeats and recovery sweeps

        assert workflow_row(database_url, run_id) == ("PENDING", a_id), "B took nothing of A's"
        assert run_status(database_url, run_id) == "waiting"
        live = sql(database_url, "SELECT count(*) FROM helix.workers WHERE state = 'live'")
        assert live[0][0] >= 2

        approve(database_url, run_id, "g1")
        wait_for(lambda: run_status(database_url, run_id) == "completed")
        assert lines(a_marks, "guarded_delete.log") == ["/data/old"], "A ran its own tool"
        assert lines(b_marks, "guarded_delete.log") == []
    finally:
        stop(a, b)


def test_workers_started_together_on_an_empty_database_all_come_up(empty_database_url, tmp_path):
    """A fleet's first deployment: three workers launch at once on a database with no
    schema. Each one's first claim read DBOS's tables while another's launch was still
    migrating them (`column ws.application_name does not exist`, 1 launch in 47 in a
    script); now each brings DBOS's schema up to date, under DBOS's lock, first. Small
    pools: the embedded server's connections are shared with the test session."""
    url = empty_database_url
    small = {"CRASH_APP_POOL_SIZE": "2"}
    workers = [spawn("serve", url, "-", "tool", tmp_path, env=small) for _ in range(3)]
    front = None
    try:
        ready = [started(w) for w in workers]
        assert all(r["ready"] for r in ready), ready
        assert sql(url, "SELECT count(*) FROM helix.workers WHERE state = 'live'") == [(3,)]
        front = spawn(
            "run", url, "-", "tool", tmp_path, env={**small, "CRASH_APP_EXECUTES_RUNS": "0"}
        )
        first = started(front)
        assert started(front)["status"] == "completed"
        (executor,) = sql(
            url,
            "SELECT executor_id FROM dbos.workflow_status WHERE workflow_uuid = %s",
            f"helix-{first['run_id']}",
        )[0]
        assert executor in {r["ready"] for r in ready}, "one of the three executed the run"
        assert all(w.poll() is None for w in workers), "every worker is still running"
    finally:
        stop(front, *workers)


def test_a_second_live_process_under_the_same_executor_id_is_refused(database_url, tmp_path):
    executor = f"dup-{os.getpid()}-{time.monotonic_ns()}"
    a = spawn("serve", database_url, executor, "tool", tmp_path)
    try:
        assert started(a)["ready"] == executor
        b = forkserver.run(
            [sys.executable, str(APP), "serve", database_url, executor, "tool", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert b.returncode != 0
        assert f"Executor id '{executor}' is in use by a live worker" in b.stderr
        assert a.poll() is None, "the first process is untouched"
        assert sql(
            database_url, "SELECT pid, state FROM helix.workers WHERE executor_id = %s", executor
        ) == [(a.pid, "live")]
    finally:
        stop(a)


def test_a_launch_that_outlasts_the_fence_does_not_fence_the_worker(database_url, tmp_path):
    """The lease is renewed while DBOS launches (it once was not: a launch longer than 60%
    of the lease made the worker exit 75 right after it)."""
    proc = spawn("serve", database_url, "-", "tool", tmp_path, env={"CRASH_APP_SLOW_LAUNCH": "3.5"})
    try:
        assert started(proc)["ready"]
        time.sleep(3)  # past the fence's threshold (2.4 s) again
        assert proc.poll() is None, f"the worker exited with {proc.returncode}"
    finally:
        stop(proc)


def test_runs_of_a_worker_killed_for_good_complete_on_a_survivor(database_url, tmp_path):
    a = spawn("start", database_url, "-", "tool", tmp_path)
    b = None
    try:
        first = started(a)
        run_id, session_id = first["run_id"], first["session_id"]
        a_id = executor_of(database_url, a)
        b = spawn("serve", database_url, "-", "tool", tmp_path)
        b_id = started(b)["ready"]
        wait_for(lambda: (tmp_path / "in_slow_b").exists())

        sigkill(a)
        died = time.monotonic()
        wait_for(lambda: run_status(database_url, run_id) == "completed", timeout=60)
        took = time.monotonic() - died

        assert took < 4 * 3, f"recovered {took:.1f}s after the death, lease 4s"
        wait_for(lambda: workflow_row(database_url, run_id) == ("SUCCESS", b_id))
        assert lines(tmp_path, "record_a.log") == ["one"], "a completed tool step is not re-run"
        assert lines(tmp_path, "slow_b.log") == ["two", "two"], "the interrupted call runs again"
        assert_transcript_is_clean(database_url, session_id, run_id)
        assert sql(
            database_url,
            "SELECT state, recovered_by, recovered_runs FROM helix.workers WHERE executor_id = %s",
            a_id,
        ) == [("dead", b_id, 1)]
    finally:
        stop(a, b)


def test_a_stalled_worker_drops_its_claimed_run_and_its_run_completes_once_elsewhere(
    database_url, tmp_path
):
    """SIGSTOP past the lease: a survivor takes the run; on SIGCONT the stalled worker
    finds its lease claimed, drops the run without executing another step of it, and
    stays up under its executor id (it once exited with code 75 instead)."""
    a = spawn("start", database_url, "-", "tool", tmp_path)
    b = None
    try:
        first = started(a)
        run_id, session_id = first["run_id"], first["session_id"]
        a_id = executor_of(database_url, a)
        b = spawn("serve", database_url, "-", "tool", tmp_path)
        b_id = started(b)["ready"]
        wait_for(lambda: (tmp_path / "in_slow_b").exists())

        a.send_signal(signal.SIGSTOP)
        wait_for(lambda: run_status(database_url, run_id) == "completed", timeout=60)
        a.send_signal(signal.SIGCONT)
        wait_for(lambda: worker_state(database_url, a_id) == "live")  # it registered again

        wait_for(lambda: workflow_row(database_url, run_id) == ("SUCCESS", b_id))
        time.sleep(2)  # what the resumed worker would do with the run, if anything
        assert a.poll() is None, f"the stalled worker exited with {a.returncode}"
        assert lines(tmp_path, "record_a.log") == ["one"]
        assert lines(tmp_path, "slow_b.log") == ["two", "two"]
        assert len(lines(tmp_path, "llm.log")) == 3, "no LLM call ran twice"
        assert_transcript_is_clean(database_url, session_id, run_id)
    finally:
        stop(a, b)


def test_a_run_enqueued_by_a_process_that_runs_no_agents_is_executed_by_a_worker(
    database_url, tmp_path
):
    front_marks, worker_marks = tmp_path / "front", tmp_path / "worker"
    front_marks.mkdir()
    worker_marks.mkdir()
    worker = spawn("serve", database_url, "-", "tool", worker_marks)
    front = None
    try:
        worker_id = started(worker)["ready"]
        front = spawn(
            "run", database_url, "-", "tool", front_marks, env={"CRASH_APP_EXECUTES_RUNS": "0"}
        )
        first = started(front)
        front_id = executor_of(database_url, front)
        assert started(front)["status"] == "completed"

        assert sql(
            database_url,
            "SELECT status, executor_id, queue_name FROM dbos.workflow_status "
            "WHERE workflow_uuid = %s",
            f"helix-{first['run_id']}",
        ) == [("SUCCESS", worker_id, "helix.agent.crash_agent")]
        assert lines(front_marks, "llm.log") == [], "the front executed nothing"
        assert lines(worker_marks, "record_a.log") == ["one"]
        assert sql(
            database_url,
            "SELECT agents, executes_runs FROM helix.workers WHERE executor_id = %s",
            front_id,
        ) == [([], False)]
        assert_transcript_is_clean(database_url, first["session_id"], first["run_id"])
    finally:
        stop(front, worker)


@pytest.mark.parametrize("executes_runs", ["1", "0"])
def test_a_burst_of_starts_larger_than_the_pool_completes(database_url, tmp_path, executes_runs):
    """20 concurrent execute() calls on a pool of 2 (+2 overflow): each start holds its
    lock connection while it opens the run on another; unbounded, they took every
    connection and waited forever (0 of 20 returned)."""
    marks = tmp_path / "front"
    marks.mkdir()
    worker = None if executes_runs == "1" else spawn("serve", database_url, "-", "tool", tmp_path)
    env = {
        "CRASH_APP_RUNS": "20",
        "CRASH_APP_CONCURRENT_STARTS": "1",
        "CRASH_APP_POOL_SIZE": "2",
        "CRASH_APP_EXECUTES_RUNS": executes_runs,
    }
    proc = spawn("run", database_url, "-", "tool", marks, env=env)
    try:
        if worker is not None:
            started(worker)
        runs = [started(proc) for _ in range(20)]
        results = [started(proc) for _ in range(20)]
    finally:
        stop(proc, worker)
    assert len({r["run_id"] for r in runs}) == 20
    assert [r["status"] for r in results] == ["completed"] * 20


def test_a_run_queue_with_concurrency_one_runs_one_run_at_a_time(database_url, tmp_path):
    env = {"CRASH_APP_QUEUE": "1", "CRASH_APP_RUNS": "3"}
    proc = spawn("run", database_url, "-", "queued", tmp_path, env=env)
    try:
        runs = [started(proc) for _ in range(3)]
        results = [started(proc) for _ in range(3)]
    finally:
        stop(proc)
    assert [r["status"] for r in results] == ["completed"] * 3
    rows = sql(
        database_url,
        "SELECT queue_name, queue_partition_key FROM dbos.workflow_status "
        "WHERE workflow_uuid = ANY(%s)",
        [f"helix-{r['run_id']}" for r in runs],
    )
    assert rows == [("crash-limited", "mock")] * 3, "partitioned by the agent's model"
    marks = [line.split() for line in lines(tmp_path, "pause.log")]
    spans = [(float(marks[i][1]), float(marks[i + 1][1])) for i in range(0, len(marks), 2)]
    assert [m[0] for m in marks] == ["begin", "end"] * 3, "never two runs' tools at once"
    assert all(later[0] >= earlier[1] for earlier, later in zip(spans, spans[1:], strict=False))


def run_cli(database_url: str, *args: str) -> subprocess.CompletedProcess:
    return forkserver.run(
        [sys.executable, "-m", "helix_dbos.cli", *args, "--database-url", database_url],
        capture_output=True,
        text=True,
        timeout=120,
    )


def cli_json(database_url: str, *args: str) -> dict:
    done = run_cli(database_url, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_workers_and_recover_commands_with_no_live_worker_left(database_url, tmp_path):
    """The operator's path: a worker dies and none is running; `recover` is refused while
    its lease is live, then hands its run back; the run waits (listed by `workers`) until
    a worker serving its agent starts, which completes it. A 15 s lease keeps the first
    checks inside it on a loaded machine."""
    a = spawn("start", database_url, "-", "tool", tmp_path, env={"CRASH_APP_LEASE_SECONDS": "15"})
    b = None
    try:
        first = started(a)
        run_id, session_id = first["run_id"], first["session_id"]
        a_id = executor_of(database_url, a)
        wait_for(lambda: (tmp_path / "in_slow_b").exists())
        sigkill(a)

        refused = run_cli(database_url, "recover", a_id)
        assert refused.returncode == 2
        assert f"Worker '{a_id}'" in refused.stderr and "is alive" in refused.stderr

        listed = cli_json(database_url, "workers")
        mine = [w for w in listed["workers"] if w["executor_id"] == a_id]
        assert [w["pending_runs"] for w in mine] == [1]
        assert mine[0]["state"] in ("live", "expired")  # no claim yet: no other worker runs

        def lapsed() -> bool:
            listed = cli_json(database_url, "workers")
            return [w["state"] for w in listed["workers"] if w["executor_id"] == a_id] == [
                "expired"
            ]

        def lapsed_in_sql() -> bool:  # what `workers` calls expired, without a CLI each poll
            return sql(
                database_url,
                "SELECT state = 'live' AND heartbeat_at < now() - make_interval("
                "secs => lease_seconds) FROM helix.workers WHERE executor_id = %s",
                a_id,
            ) == [(True,)]

        wait_for(lapsed_in_sql, timeout=30)
        assert lapsed()
        doctor = run_cli(database_url, "doctor", "--json")
        held = [c for c in json.loads(doctor.stdout) if c["name"] == "held runs"]
        assert held and held[0]["level"] == "warn", doctor.stdout
        assert f"{a_id} (expired)" in held[0]["found"] and "crash_agent" in held[0]["found"]
        assert (
            f"helix-dbos recover {a_id}" in held[0]["fix"] and "helix-dbos worker" in held[0]["fix"]
        )

        recovered = run_cli(database_url, "recover", a_id)
        assert recovered.returncode == 0, recovered.stderr
        assert f"Worker {a_id} recovered: 1 run(s) handed back" in recovered.stdout
        assert workflow_row(database_url, run_id)[0] == "ENQUEUED"

        listed = cli_json(database_url, "workers")
        assert [r["run_id"] for r in listed["runs_without_worker"]] == [run_id]
        table = run_cli(database_url, "workers")
        assert "1 queued run(s) wait for a worker" in table.stdout
        assert "No live workers" in table.stdout, "a dead worker holding nothing is history"
        assert "dead" in run_cli(database_url, "workers", "--all").stdout
        runs = run_cli(database_url, "runs", "--session", session_id)
        assert "queued (helix.agent.crash_agent)" in runs.stdout

        b = spawn("serve", database_url, "-", "tool", tmp_path)
        b_id = started(b)["ready"]
        wait_for(lambda: workflow_row(database_url, run_id) == ("SUCCESS", b_id))
        assert lines(tmp_path, "record_a.log") == ["one"]
        assert_transcript_is_clean(database_url, session_id, run_id)
        assert sql(
            database_url,
            "SELECT state, recovered_by LIKE 'cli:%%', recovered_runs FROM helix.workers "
            "WHERE executor_id = %s",
            a_id,
        ) == [("dead", True, 1)]
    finally:
        stop(a, b)


def test_a_worker_cut_off_from_the_database_waits_and_drops_what_another_took_over(
    database_url, tmp_path
):
    """Worker A reaches PostgreSQL through a proxy; cutting it for longer than A's lease
    leaves A alive but unable to renew: A waits (it once exited with code 75), B claims
    A and runs its run. When the proxy comes back, A learns its lease was claimed and
    registers again; its tool call that was in flight at the cut then returns, and A
    drops the run: no step re-run, nothing written twice, B completes it."""
    proxy = CuttableProxy(database_url)
    # "restart": slow_b waits for the `release` marker, in A and in B alike.
    a = spawn("start", proxy.url, "-", "restart", tmp_path)
    b = None
    try:
        first = started(a)
        run_id, session_id = first["run_id"], first["session_id"]
        a_id = executor_of(database_url, a)
        b = spawn("serve", database_url, "-", "restart", tmp_path)
        b_id = started(b)["ready"]
        wait_for(lambda: (tmp_path / "in_slow_b").exists())

        proxy.cut()
        # B claims A and runs the interrupted call again (A's is still in flight).
        wait_for(lambda: len(lines(tmp_path, "slow_b.log")) == 2, timeout=60)
        assert worker_state(database_url, a_id) == "dead"
        assert workflow_row(database_url, run_id) == ("PENDING", b_id)
        time.sleep(5)  # longer than A's lease (4 s): cut off, A does not exit
        assert a.poll() is None, f"the cut-off worker exited with {a.returncode}"

        proxy.restore()
        wait_for(lambda: worker_state(database_url, a_id) == "live")  # it registered again
        (tmp_path / "release").touch()  # A's call and B's return
        wait_for(lambda: workflow_row(database_url, run_id) == ("SUCCESS", b_id))
        assert run_status(database_url, run_id) == "completed"
        written = transcript_counts(database_url, session_id)
        time.sleep(3)  # what A would still do with the run it lost, if anything
        assert transcript_counts(database_url, session_id) == written, "A wrote nothing late"
        assert a.poll() is None, f"the reconnected worker exited with {a.returncode}"
        assert lines(tmp_path, "record_a.log") == ["one"], "no completed step re-ran"
        # In flight in A when the cut came, the call ran again in B (as after a SIGKILL).
        assert lines(tmp_path, "slow_b.log") == ["two", "two"]
        assert len(lines(tmp_path, "llm.log")) == 3, "no LLM call ran twice"
        assert_transcript_is_clean(database_url, session_id, run_id)
        assert (
            sql(
                database_url,
                "SELECT count(*) FROM helix.stream_chunks WHERE session_id = %s "
                "GROUP BY chunk_key HAVING count(*) > 1",
                session_id,
            )
            == []
        ), "no chunk twice"
    finally:
        stop(a, b)
        proxy.close()


def test_the_fleet_example_a_cli_worker_executes_what_a_front_enqueues(database_url, tmp_path):
    """`helix-dbos worker --app examples/fleet.py:helix` executes the run that
    `python examples/fleet.py` enqueues; SIGTERM stops the worker cleanly."""
    apply_migrations(database_url)  # the worker creates the schema too, but the test polls it first
    env = {**os.environ, "HELIX_DATABASE_URL": database_url}
    log = open(tmp_path / "worker.log", "w")  # noqa: SIM115
    worker = forkserver.Popen(
        [sys.executable, "-m", "helix_dbos.cli", "worker", "--app", f"{EXAMPLES}/fleet.py:helix"],
        stderr=log,
        env=env,
    )
    try:
        worker_id = executor_of(database_url, worker)
        front = forkserver.run(
            [sys.executable, f"{EXAMPLES}/fleet.py", "reset my password"],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert front.returncode == 0, front.stderr
        result = json.loads(front.stdout)
        assert result["status"] == "completed"
        assert result["output"]["worker"] == str(worker.pid), "the worker ran it, not the front"
        assert "reset my password" in result["output"]["answer"]
        assert sql(
            database_url,
            "SELECT executor_id, queue_name FROM dbos.workflow_status WHERE workflow_uuid = %s",
            f"helix-{result['run_id']}",
        ) == [(worker_id, "fleet")]

        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0
        assert sql(
            database_url, "SELECT state FROM helix.workers WHERE executor_id = %s", worker_id
        ) == [("stopped",)]
        assert (
            f"worker {worker_id} serving fleet_assistant" in (tmp_path / "worker.log").read_text()
        )
    finally:
        stop(worker)


def test_a_queued_run_interrupted_before_a_worker_takes_it_asks_no_model_and_resumes(
    database_url, tmp_path
):
    """Issue 37: a front (`executes_runs=False`) enqueues a run while no worker serves its
    agent and interrupts it there. The worker that takes it later finds the interrupt
    before its first model call: the run ends `interrupted` having asked the model
    nothing and run no tool, and `resume()` continues the session to completion."""
    front_marks, worker_marks = tmp_path / "front", tmp_path / "worker"
    front_marks.mkdir()
    worker_marks.mkdir()
    front = spawn(
        "front", database_url, "-", "tool", front_marks, env={"CRASH_APP_EXECUTES_RUNS": "0"}
    )
    worker = None
    try:
        first = started(front)
        run_id, session_id = first["run_id"], first["session_id"]
        assert started(front) == {"interrupted": run_id}
        assert workflow_row(database_url, run_id)[0] == "ENQUEUED", "nobody took it yet"
        assert run_status(database_url, run_id) == "running"
        assert sql(
            database_url,
            "SELECT count(*) FROM dbos.notifications WHERE destination_uuid = %s "
            "AND topic = 'helix.interrupt' AND NOT consumed",
            f"helix-{run_id}",
        ) == [(1,)], "the interrupt waits for the run"

        worker = spawn("serve", database_url, "-", "tool", worker_marks)
        worker_id = started(worker)["ready"]
        assert started(front) == {
            "run_id": run_id,
            "status": "interrupted",
            "error": "Interrupted: stop before it starts",
        }
        assert workflow_row(database_url, run_id)[1] == worker_id, "the worker executed it"
        assert lines(worker_marks, "llm.log") == [], "no model call after the interrupt"
        assert lines(worker_marks, "record_a.log") == []
        assert sql(
            database_url,
            "SELECT count(*) FROM helix.usage WHERE run_id = %s AND kind = 'llm'",
            run_id,
        ) == [(0,)]

        resumed = started(front)
        assert resumed["run_id"] != run_id
        assert (resumed["status"], resumed["error"]) == ("completed", None)
        assert workflow_row(database_url, resumed["run_id"]) == ("SUCCESS", worker_id)
        assert len(lines(worker_marks, "llm.log")) == 3, "the resumed run's three model calls"
        assert lines(worker_marks, "record_a.log") == ["one"]
        assert lines(worker_marks, "slow_b.log") == ["two"]
        assert lines(front_marks, "llm.log") == [], "the front executed nothing"
        assert_transcript_is_clean(database_url, session_id, resumed["run_id"])
    finally:
        stop(front, worker)


@pytest.mark.parametrize("same_id", [False, True], ids=["new-id", "same-id"])
def test_a_restart_on_the_same_host_takes_over_a_crashed_predecessor_at_once(
    database_url, tmp_path, same_id
):
    """A process killed mid-run, then a short-lived process started on the same host (a
    script: it waits 60 s at most for the run): it tells the predecessor is gone (its pid
    no longer exists here, its connection is closed) and takes its run over at once,
    saying so in one line. A 120 s lease: waiting for it to lapse (the only way before)
    would outlast the script."""
    executor = f"same-{uuid.uuid4().hex[:8]}" if same_id else "-"
    env = {"CRASH_APP_LEASE_SECONDS": "120"}
    a = spawn("start", database_url, executor, "tool", tmp_path, env=env)
    try:
        first = started(a)
        run_id, session_id = first["run_id"], first["session_id"]
        a_id = executor_of(database_url, a)
        wait_for(lambda: (tmp_path / "in_slow_b").exists())
        sigkill(a)

        outcome = relaunch(database_url, executor, "tool", tmp_path, run_id, env=env)
        assert outcome["status"] == "completed", outcome
        assert lines(tmp_path, "record_a.log") == ["one"], "a completed tool step is not re-run"
        assert lines(tmp_path, "slow_b.log") == ["two", "two"], "the interrupted call runs again"
        assert_transcript_is_clean(database_url, session_id, run_id)
        said = [
            line
            for log in tmp_path.glob("stderr-recover-*.log")
            for line in log.read_text().splitlines()
            if "took over" in line
        ]
        gone = f"pid {a.pid} on this host"
        expected = "of its previous life" if same_id else f"of worker {a_id}"
        assert len(said) == 1 and expected in said[0] and gone in said[0], said
    finally:
        stop(a)


def test_a_clean_exit_leaves_a_stopped_worker_that_nobody_mentions(database_url, tmp_path):
    """A process that ends normally marks its worker `stopped`; a worker started later
    hands back nothing for it and logs nothing about it (each clean exit once cost a
    WARNING `recovered dead worker ...: 0 workflow(s) handed back`); `workers` lists it
    only with --all, and rows of workers gone for an hour are pruned."""
    script = spawn("run", database_url, "-", "tool", tmp_path)
    script_id = executor_of(database_url, script)
    assert started(script)["run_id"] and started(script)["status"] == "completed"
    assert script.wait(timeout=60) == 0
    assert worker_state(database_url, script_id) == "stopped"

    worker = spawn("serve", database_url, "-", "tool", tmp_path)
    try:
        worker_id = started(worker)["ready"]
        time.sleep(4 * 1.5)  # past the stopped worker's 4 s lease and a few sweeps
        logged = "".join(log.read_text() for log in tmp_path.glob("stderr-serve-*.log"))
        assert script_id not in logged, logged
        assert worker_state(database_url, script_id) == "stopped", "not declared dead"

        live = [w["executor_id"] for w in cli_json(database_url, "workers")["workers"]]
        every = [w["executor_id"] for w in cli_json(database_url, "workers", "--all")["workers"]]
        assert live == [worker_id] and set(every) == {worker_id, script_id}

        with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
            assert worker_workflows.prune(conn, keep_seconds=3600) == 0, "an hour of history"
            assert worker_workflows.prune(conn, keep_seconds=0) == 1
        assert [r[0] for r in sql(database_url, "SELECT executor_id FROM helix.workers")] == [
            worker_id
        ]
    finally:
        stop(worker)


def test_the_connections_an_idle_worker_holds(database_url, tmp_path):
    """An idle worker serving one agent comes down to 6 connections (the README's
    figure), whatever `pool_size`: its heartbeat's, one of helix's statement pool, and
    DBOS's LISTEN connection beside the 3 its pool keeps for its queue and scheduler
    threads. What its start opened beyond that closes (DBOS's pool and SQLAlchemy's at
    once, helix's statement pool after 30 s unused); it held 10 before they did. The
    worker's pools close unused connections after 3 s here instead of 30 s and 10 s."""
    worker = spawn(
        "serve",
        database_url,
        "-",
        "tool",
        tmp_path,
        env={"CRASH_APP_POOL_SIZE": "10", "CRASH_APP_IDLE_SECONDS": "3"},
    )
    try:
        worker_id = started(worker)["ready"]
        heartbeat = workers_sql.heartbeat_application_name(worker_id)

        def held() -> dict[str, int]:
            rows = sql(
                database_url,
                "SELECT application_name, count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() GROUP BY 1",
            )
            return dict(rows)

        def idle(counts: dict[str, int]) -> bool:
            """One heartbeat connection, one the statement pool keeps, DBOS's LISTEN
            connection and the 3 its pool keeps, and no transaction, LISTEN or other one."""
            rest = dict(counts)
            return (
                rest.pop(heartbeat, 0) == 1
                and rest.pop("helix", 0) == 1
                and rest.pop("dbos_transact", 0) <= 4
                and rest == {}
            )

        # Past max_idle. Two of the worker's periodic checks that overlap can open a second
        # statement connection for a while (it closes 30 s after its last use), so the
        # test waits for the idle state rather than sampling it once.
        seen: list[dict[str, int]] = []
        deadline = time.monotonic() + 150
        while not (seen and idle(seen[-1])):
            assert time.monotonic() < deadline, f"never down to 6 connections: {seen[-5:]}"
            seen.append(held())
            time.sleep(0.5)
    finally:
        stop(worker)
