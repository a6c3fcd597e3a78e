"""Another application takes every connection the server allows (issue 26, item 6).

On a PostgreSQL cluster of the test's own with `max_connections = 20`, a worker
(tests/apps/connections_app.py) has a run whose tool is under way. The test then takes every
free connection, as a busy neighbour would, and closes the worker's pooled connections
(all but its heartbeat's, so fencing stays out of it) until the server has no slot left
for it. Then: `execute()` waits `connection_timeout_seconds` and raises
`DatabaseUnavailableError`, naming the cause; the run in flight, its tool done, waits for
a connection instead of failing. Once the test lets its connections go, the run
completes, a new `execute()` works, and nothing ran or was written twice.
"""

from __future__ import annotations

import json
import selectors
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import forkserver
import psycopg
import pytest
from helpers import lines, wait_for
from pg_cluster import Cluster
from test_crash import assert_transcript_is_clean

APP = Path(__file__).parent / "apps" / "connections_app.py"
MAX_CONNECTIONS = 20
WORKER_POOLS = "application_name IN ('helix', 'helix-tx', 'helix-listen', 'dbos_transact')"

pytestmark = pytest.mark.faults


@pytest.fixture
def cluster(tmp_path: Path):
    own = Cluster(tmp_path / "pg", max_connections=MAX_CONNECTIONS)
    own.start()
    yield own
    own.destroy()


def read_line(proc: subprocess.Popen, err: Path, timeout: float = 120) -> dict:
    assert proc.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    ready = selector.select(timeout)
    selector.close()
    line = proc.stdout.readline() if ready else ""
    assert line, f"no line from the worker:\n{err.read_text()[-4000:]}"
    return json.loads(line)


class Neighbour:
    """Another application's connections: as many as the server will give."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.held: list[psycopg.Connection] = []

    def take_all(self) -> None:
        while True:
            try:
                conn = psycopg.connect(self.url, application_name="neighbour", autocommit=True)
            except psycopg.OperationalError as exc:
                assert "too many clients" in str(exc), exc
                return
            self.held.append(conn)

    @contextmanager
    def taking_freed_slots(self) -> Iterator[None]:
        """Take each slot freed meanwhile (a terminated backend that exits late) within
        20 ms, before the worker's pools, which reconnect with a backoff, can."""
        stop = threading.Event()

        def take() -> None:
            while not stop.wait(0.02):
                self.take_all()

        thread = threading.Thread(target=take, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def release(self) -> None:
        for conn in self.held:
            conn.close()
        self.held.clear()


def test_a_full_server_makes_execute_fail_clearly_and_runs_wait(cluster, tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    err = markers / "worker.err"
    worker = forkserver.Popen(
        [sys.executable, str(APP), cluster.url, str(markers)],
        stdout=subprocess.PIPE,
        stderr=open(err, "w"),  # noqa: SIM115 (the child owns it)
        text=True,
    )
    neighbour = Neighbour(cluster.url)
    try:
        started = read_line(worker, err)
        run_id, session_id = started["run_id"], started["session_id"]
        wait_for(lambda: lines(markers, "hold.log") == ["one"])
        observer = psycopg.connect(cluster.url, application_name="observer", autocommit=True)

        def heartbeating() -> bool:
            query = "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'helix-hb:%'"
            row = observer.execute(query).fetchone()
            return row is not None and row[0] == 1

        wait_for(heartbeating)  # its first beat opens it
        neighbour.take_all()

        def worker_pooled() -> int:
            row = observer.execute(
                f"SELECT count(*) FROM pg_stat_activity WHERE {WORKER_POOLS}"
            ).fetchone()
            assert row is not None
            return int(row[0])

        def starve() -> None:
            """No pooled connection of the worker's, and no slot left for one."""
            for _ in range(50):  # the worker's pools reconnect as fast as slots free up
                observer.execute(
                    f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE {WORKER_POOLS}"
                )
                time.sleep(0.2)
                neighbour.take_all()
                if worker_pooled() == 0:
                    break
            assert worker_pooled() == 0, "the worker kept a pooled connection"

        starve()
        logged = len(err.read_text())
        (markers / "release-tool").touch()

        def step_output_waits() -> bool:  # DBOS retrying the tool step's checkpoint
            since = err.read_text()[logged:]
            return "Database connection failed: " in since and "too many clients" in since

        wait_for(step_output_waits)
        wait_for(lambda: "helix retires its pooled connections" in err.read_text())

        # A slot freed meanwhile (a terminated backend that exited late) could go to the
        # worker's statement pool, which keeps reconnecting: execute() then took it and
        # waited inside DBOS's workflow start, which retries until the server has room
        # (DBOS's choice: correctness over availability), and printed nothing within
        # 120 s (seen three times in full runs). So starve again, and from then on take
        # each freed slot at once until execute() has answered.
        starve()
        with neighbour.taking_freed_slots():
            (markers / "execute-now").touch()
            refused = read_line(worker, err)
        assert refused["refused"] == "DatabaseUnavailableError", refused
        assert "execute(): no database connection within" in refused["message"], refused
        assert "the server refused a new connection" in refused["message"], refused
        assert "too many clients" in refused["message"], refused
        assert refused["waited"] >= 3, "it waited connection_timeout_seconds first"
        print(refused["message"])

        # The run in flight waits: its tool is done, its workflow pending, nothing failed.
        status = observer.execute(
            "SELECT r.status, w.status FROM helix.runs r JOIN dbos.workflow_status w "
            "ON w.workflow_uuid = r.workflow_id WHERE r.run_id = %s",
            (run_id,),
        ).fetchone()
        assert status == ("running", "PENDING"), status
        assert worker.poll() is None, err.read_text()[-4000:]

        neighbour.release()
        ended = read_line(worker, err)
        assert ended["first"] == "completed" and ended["second"] == "completed", ended
        assert worker.wait(60) == 0
        observer.close()
    finally:
        neighbour.release()
        if worker.poll() is None:
            worker.kill()
            worker.wait()

    # Nothing twice: each tool ran once, the model was asked once per step, and the
    # transcripts hold each message once.
    assert lines(markers, "hold.log") == ["one", "two"]
    assert sorted(lines(markers, "llm.log")) == ["one:1", "one:3", "two:1", "two:3"]
    rows = assert_transcript_is_clean(cluster.url, session_id, run_id)
    assert [r[1] for r in rows] == ["user", "assistant", "tool", "assistant"]
    second = assert_transcript_is_clean(
        cluster.url, ended["second_session_id"], ended["second_run_id"]
    )
    assert [r[1] for r in second] == ["user", "assistant", "tool", "assistant"]
    assert "refused" not in (tmp_path / "markers" / "llm.log").read_text()
