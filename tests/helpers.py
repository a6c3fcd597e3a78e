"""Small helpers shared by tests: plain SQL against the test database, a terminal,
polling, the marker files of the crash apps, a scripted LLM's tool calls, the wait for a
run that waits for a human, and a tool that waits for approval."""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import forkserver
import psycopg
import pytest
from scripted import calls, text  # noqa: F401 - the tests take them from here

from helix_dbos import tool
from helix_dbos.orchestration.types import ToolCall, ToolCallsStepResult
from helix_dbos.store.database import libpq_url

if TYPE_CHECKING:
    from helix_dbos import HelixDBOS, Tool
    from helix_dbos.store.repository import PendingToolCall


class _KeptConnections:
    """Idle connections of this process, for `sql`. A wait that polls the database every
    50 ms opened a connection a poll, each a new PostgreSQL backend: thousands in a run, a
    large part of the test server's CPU. A connection serves one call at a time (a query
    of one thread that blocks never holds up another's); one the server ended (a restart,
    a terminated backend, a dropped database) is replaced; the oldest beyond `KEEP` close."""

    KEEP = 8

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._idle: list[tuple[str, psycopg.Connection[Any]]] = []
        self._inherited: list[tuple[str, psycopg.Connection[Any]]] = []

    def take(self, url: str) -> psycopg.Connection[Any] | None:
        with self._lock:
            if self._pid != os.getpid():  # a forked child: its parent's sockets are not its own
                # Kept, never closed or collected: closing sends the server a goodbye for
                # the parent's backend.
                self._inherited.extend(self._idle)
                self._pid, self._idle = os.getpid(), []
            for i in range(len(self._idle) - 1, -1, -1):
                if self._idle[i][0] == url:
                    return self._idle.pop(i)[1]
            return None

    def give_back(self, url: str, conn: psycopg.Connection[Any]) -> None:
        idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        if conn.broken or conn.closed or not idle:  # not idle: a query string with a BEGIN
            conn.close()
            return
        with self._lock:
            if self._pid != os.getpid():
                return
            self._idle.append((url, conn))
            oldest = self._idle[: -self.KEEP]
            del self._idle[: -self.KEEP]
        for _, old in oldest:
            old.close()


_kept = _KeptConnections()


def _query(conn: psycopg.Connection[Any], query: str, params: tuple[Any, ...]) -> list[Any]:
    cur = conn.execute(query, params or None)
    return cur.fetchall() if cur.description else []


def sql(database_url: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    """Run one query (tests check rows with plain SQL, as users would), in autocommit, on a
    connection this process keeps for the database. If the kept connection was ended by
    the server since its last use (a restart, a terminated backend), the query runs again
    on a new one: its backend was gone before the query came. (One the server ends while
    it runs would run twice: no test writes through here while it restarts the server.)"""
    url = libpq_url(database_url)
    conn = _kept.take(url)
    if conn is not None:
        try:
            return _query(conn, query, params)
        except psycopg.OperationalError:
            if not conn.broken:
                raise
        finally:
            _kept.give_back(url, conn)  # or closed, if broken
    # Never prepared: a test may reach the server through PgBouncer in transaction mode.
    conn = psycopg.connect(url, autocommit=True, prepare_threshold=None)
    try:
        return _query(conn, query, params)
    finally:
        _kept.give_back(url, conn)


def skip_or_fail_in_ci(reason: str) -> NoReturn:
    """Skip a test whose tool is missing here, but fail it in CI (CI=true), where a missing
    tool means the CI script no longer installs it and the test would silently stop running."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI is missing what this test needs: {reason}")
    pytest.skip(reason)


def in_terminal(
    args: list[str], *, env: dict[str, str], columns: int, cwd: str | os.PathLike[str]
) -> tuple[int, str]:
    """Run a command with stdout and stderr on a pseudo-terminal `columns` wide (COLUMNS
    set too, as a shell would): its exit code and what the terminal showed, without
    escape codes."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {**env, "COLUMNS": str(columns), "TERM": "xterm", "NO_COLOR": "1"}
    proc = forkserver.Popen(args, stdout=slave, stderr=slave, env=env, cwd=cwd)
    os.close(slave)
    chunks: list[bytes] = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    code = proc.wait(timeout=120)
    shown = b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")
    return code, re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07", "", shown)


def has_pgvector(database_url: str) -> bool:
    """Whether the server can create the pgvector extension (the embedded one can)."""
    with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'"
        ).fetchone()
    return bool(row and row[0])


def require_pgvector(database_url: str) -> None:
    """Skip a memory test that needs vector search on a server without pgvector (the
    fallback there is tested by test_memory_fallback.py)."""
    if not has_pgvector(database_url):
        pytest.skip("needs pgvector on the server; test_memory_fallback.py covers its absence")


def wait_for(predicate: Callable[[], object], timeout: float = 60.0) -> None:
    """Poll `predicate` every 50 ms until it is true; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def step_calls(*items: tuple[str, str, Any], **extra: Any) -> ToolCallsStepResult:
    """The same as a parsed `StepResult`: (id, name, arguments) each, `extra` its fields."""
    return ToolCallsStepResult(
        tool_calls=[ToolCall(id=i, name=n, arguments=a) for i, n, a in items], **extra
    )


async def wait_until_waiting(
    helix: HelixDBOS, session_id: str, count: int = 1, timeout: float = 60.0
) -> list[PendingToolCall]:
    """The session's unanswered calls, once its run is `waiting` with `count` of them."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = await helix.get_current_run(session_id)
        pending = [p for p in await helix.pending_tool_calls(session_id) if not p.answered]
        if run is not None and run.status == "waiting" and len(pending) >= count:
            return pending
        await asyncio.sleep(0.05)
    raise AssertionError(f"the run of session {session_id} never waited for {count} calls")


async def pending_calls(
    helix: HelixDBOS, session_id: str, count: int = 1, timeout: float = 60.0
) -> list[PendingToolCall]:
    """The calls waiting for a human in the session, once there are `count` of them."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pending = await helix.pending_tool_calls(session_id)
        if len(pending) >= count:
            return pending
        await asyncio.sleep(0.05)
    raise AssertionError(f"session {session_id} never had {count} calls waiting")


def approval_gated_delete(ran: list[str] | None = None) -> Tool:
    """A `delete_file` tool that waits for a human's approval; each path it deletes is
    appended to `ran` (a test's proof that the tool ran, and how often)."""

    @tool(require_approval=True)
    def delete_file(path: str) -> str:
        """Delete a file."""
        if ran is not None:
            ran.append(path)
        return f"deleted {path}"

    return delete_file


def client_confirm(timeout_seconds: float | None = None) -> Tool:
    """A `confirm` tool the client executes; unanswered, it times out after
    `timeout_seconds` (the process's client-tool timeout when None)."""

    @tool(execute="client", client_timeout_seconds=timeout_seconds)
    def confirm(question: str) -> dict:
        """Ask the client to confirm."""

    return confirm


async def park_waiting_runs(helix: HelixDBOS) -> None:
    """Park the process's waiting runs, once one waits in memory: each execution lets go,
    and its answer resumes it by a replay from its first step."""
    parking = helix.runtime.parking
    for _ in range(600):
        if parking.in_memory >= 1:
            break
        await asyncio.sleep(0.05)
    parked = parking.parked_total
    assert parking.park_all() >= 1 and parking.parked_total > parked
    await asyncio.sleep(0.2)  # the parked tasks end


def lines(markers: Path, name: str) -> list[str]:
    """The lines of a crash app's marker file (none yet: [])."""
    path = markers / name
    return path.read_text().splitlines() if path.exists() else []


def set_version(database_url: str, run_id: str, version: str) -> None:
    """Make the run's DBOS workflow one of `version` (as an upgrade leaves a run: a
    version no live worker runs unless it is this process's own)."""
    sql(
        database_url,
        "UPDATE dbos.workflow_status SET application_version = %s WHERE workflow_uuid = "
        "(SELECT workflow_id FROM helix.runs WHERE run_id = %s)",
        version,
        run_id,
    )


def answered(database_url: str, run_id: str) -> list[tuple[str, object]]:
    """Each call of the run and when it was claimed for an answer."""
    return [
        (r[0], r[1])
        for r in sql(
            database_url,
            "SELECT tool_call_id, answered_at FROM helix.tool_calls WHERE run_id = %s "
            "ORDER BY tool_call_id",
            run_id,
        )
    ]


def messages_to(database_url: str, run_id: str) -> int:
    """How many DBOS messages wait for the run's workflow."""
    return sql(
        database_url,
        "SELECT count(*) FROM dbos.notifications WHERE destination_uuid = "
        "(SELECT workflow_id FROM helix.runs WHERE run_id = %s)",
        run_id,
    )[0][0]


async def cli(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`helix-dbos ARGS` in a subprocess against `database_url` (no other HELIX_*
    variable of this environment), without blocking the event loop runs live on."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELIX_")}
    return await asyncio.to_thread(
        forkserver.run,
        [sys.executable, "-m", "helix_dbos.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "HELIX_DATABASE_URL": database_url},
        cwd=Path(__file__).resolve().parent.parent,
    )
