"""Scheduled agents on a fleet (issue 34): two worker processes of one database fire a
schedule every second, each firing exactly one run (checked in SQL); pause, resume and
delete from outside (a DBOSClient, as the CLI does); a worker SIGKILLed in a firing's
run, whose run then completes once on the survivor."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import forkserver
import pytest
from dbos import DBOSClient
from helpers import sql, wait_for

from helix_dbos.schedules.book import ScheduleBook
from helix_dbos.store.database import libpq_url

pytestmark = pytest.mark.crash
APP = Path(__file__).resolve().parent / "apps" / "schedule_app.py"
NAME = "every-second"


def spawn(database_url: str, markers: Path, **env: str) -> subprocess.Popen:
    stderr = open(markers / f"stderr-{time.monotonic_ns()}.log", "w")  # noqa: SIM115
    return forkserver.Popen(
        [sys.executable, str(APP), database_url, str(markers)],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env={**os.environ, "HELIX_SCHEDULER_POLL_SECONDS": "1", **env},
    )


def ready(proc: subprocess.Popen) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, f"the worker exited ({proc.wait()})"
    return json.loads(line)["ready"]


def stop(*procs: subprocess.Popen) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def count_firings(database_url: str) -> int:
    return sql(database_url, "SELECT count(*) FROM helix.schedule_firings")[0][0]


def wait_until_quiet(database_url: str, quiet_seconds: float = 3.0) -> int:
    """Wait until no firing was recorded for `quiet_seconds` (a pause or delete is seen
    at each process's next scheduler poll, 1 s here); the count then."""
    last, since = count_firings(database_url), time.monotonic()
    deadline = since + 60
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = count_firings(database_url)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_seconds:
            return now
    raise AssertionError("firings never stopped")


def assert_each_firing_made_one_run(database_url: str) -> None:
    firing_workflows = sql(
        database_url,
        "SELECT workflow_uuid, status FROM dbos.workflow_status "
        "WHERE name = 'helix.scheduled_firing' ORDER BY workflow_uuid",
    )
    assert {s for _, s in firing_workflows} == {"SUCCESS"}
    recorded = sql(
        database_url,
        "SELECT f.firing_id, f.outcome, count(r.run_id), min(r.status), count(DISTINCT r.session_id) "
        "FROM helix.schedule_firings f LEFT JOIN helix.runs r ON r.session_id = f.session_id "
        "GROUP BY f.firing_id, f.outcome ORDER BY f.firing_id",
    )
    assert [r[0] for r in recorded] == [w for w, _ in firing_workflows]
    assert all(r[1:] == ("started", 1, "completed", 1) for r in recorded), recorded
    per_time = sql(
        database_url,
        "SELECT scheduled_at, count(*) FROM helix.schedule_firings GROUP BY 1 HAVING count(*) > 1",
    )
    assert per_time == []


def test_two_workers_fire_each_second_once_and_obey_pause_resume_delete(database_url, tmp_path):
    env = {"SCHEDULE_APP_CRON": "* * * * * *", "SCHEDULE_APP_NAME": NAME}
    a = spawn(database_url, tmp_path, **env)
    b = spawn(database_url, tmp_path, **env)
    client = DBOSClient(system_database_url=libpq_url(database_url), application_name="helix_dbos")
    try:
        ready(a), ready(b)
        book = ScheduleBook(client, app_name="helix_dbos")
        assert [s.name for s in book.list_all()] == [NAME]  # both scheduled it: one schedule
        wait_for(lambda: count_firings(database_url) >= 6, timeout=60)

        assert book.pause(NAME).status == "paused"
        paused_at = wait_until_quiet(database_url)
        time.sleep(2)
        assert count_firings(database_url) == paused_at

        assert book.resume(NAME).status == "active"
        wait_for(lambda: count_firings(database_url) >= paused_at + 3, timeout=60)
        book.delete(NAME)
        final = wait_until_quiet(database_url)
        assert book.list_all() == []

        wait_for(
            lambda: (
                sql(
                    database_url,
                    "SELECT count(*) FROM helix.runs WHERE status = 'completed'",
                )[0][0]
                == final
            ),
            timeout=60,
        )
        assert_each_firing_made_one_run(database_url)
        executors = sql(
            database_url,
            "SELECT DISTINCT executor_id FROM dbos.workflow_status "
            "WHERE name = 'helix.scheduled_firing'",
        )
        assert executors  # (which worker ran which firing is the queue's choice)
    finally:
        client.destroy()
        stop(a, b)


def test_a_worker_killed_in_a_firings_run_leaves_it_to_complete_once(database_url, tmp_path):
    env = {
        "SCHEDULE_APP_CRON": "* * * * * *",
        "SCHEDULE_APP_NAME": NAME,
        "SCHEDULE_APP_AGENT": "holder",
    }
    a = spawn(database_url, tmp_path, **env)
    b = spawn(database_url, tmp_path, **env)
    procs = {a.pid: a, b.pid: b}
    client = DBOSClient(system_database_url=libpq_url(database_url), application_name="helix_dbos")
    try:
        ready(a), ready(b)
        held = tmp_path / "first_hold"
        wait_for(lambda: held.exists() and held.read_text() != "", timeout=60)
        pid, held_run = held.read_text().split()
        victim = procs[int(pid)]
        survivor = b if victim is a else a
        victim.kill()
        victim.wait(timeout=30)

        wait_for(
            lambda: (
                sql(database_url, "SELECT status FROM helix.runs WHERE run_id = %s", held_run)
                == [("completed",)]
            ),
            timeout=90,
        )
        book = ScheduleBook(client, app_name="helix_dbos")
        book.delete(NAME)
        final = wait_until_quiet(database_url)
        wait_for(
            lambda: (
                sql(database_url, "SELECT count(*) FROM helix.runs WHERE status = 'completed'")[0][
                    0
                ]
                == final
            ),
            timeout=90,
        )
        assert_each_firing_made_one_run(database_url)
        tool_results = sql(
            database_url,
            "SELECT count(*) FROM helix.messages WHERE run_id = %s AND role = 'tool'",
            held_run,
        )
        assert tool_results == [(1,)]  # the killed call ran again, and was recorded once
        assert survivor.poll() is None
    finally:
        client.destroy()
        stop(a, b)


def test_automatic_backfill_fires_what_no_process_was_there_to_fire(database_url, tmp_path):
    env = {
        "SCHEDULE_APP_CRON": "* * * * * *",
        "SCHEDULE_APP_NAME": NAME,
        "SCHEDULE_APP_BACKFILL": "1",
    }
    first = spawn(database_url, tmp_path, **env)
    try:
        ready(first)
        wait_for(lambda: count_firings(database_url) >= 2, timeout=60)
    finally:
        stop(first)  # nobody fires from now on
    stopped = time.time()
    time.sleep(4)
    restarting = time.time()
    second = spawn(database_url, tmp_path, **env)
    client = DBOSClient(system_database_url=libpq_url(database_url), application_name="helix_dbos")
    try:
        ready(second)
        before = count_firings(database_url)
        wait_for(lambda: count_firings(database_url) >= before + 6, timeout=60)
        ScheduleBook(client, app_name="helix_dbos").delete(NAME)
        final = wait_until_quiet(database_url)
        wait_for(
            lambda: (
                sql(database_url, "SELECT count(*) FROM helix.runs WHERE status = 'completed'")[0][
                    0
                ]
                == final
            ),
            timeout=90,
        )
        assert_each_firing_made_one_run(database_url)
        fired = {
            second
            for (second,) in sql(
                database_url,
                "SELECT extract(epoch FROM scheduled_at)::bigint FROM helix.schedule_firings",
            )
        }
        # Every second while no process ran was fired when one started again.
        missed = set(range(math.ceil(stopped), math.floor(restarting) + 1))
        assert len(missed) >= 3 and missed <= fired, sorted(missed - fired)
    finally:
        client.destroy()
        stop(second)
