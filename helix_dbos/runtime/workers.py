"""A worker's lease: its row in `helix.workers`, its heartbeat, its fence, and the
recovery of workers whose lease lapsed.

Why a lease and a fence: DBOS 3.4 recovers only the workflows of the executor id a
process starts under. A worker that dies for good would leave its runs PENDING forever,
and resuming the runs of a worker that is merely slow runs their tools twice. So each
worker renews a lease on its own connection; a live worker of the same application
claims a lapsed one (one claimant: a conditional UPDATE) and hands its runs back to DBOS's
queues; and a worker that could not renew for most of its lease stops executing (exits)
before anyone may claim it, so a slow worker is never run twice.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg

from helix_dbos.errors import ExecutorIdInUseError, WorkerNotDeadError
from helix_dbos.store import workers as sql
from helix_dbos.store.database import connect

logger = logging.getLogger("helix_dbos.workers")

DEFAULT_LEASE_SECONDS = 15.0
# A worker stops executing once this share of its lease passed without a renewal; the
# rest of the lease is the margin before anyone may claim it.
FENCE_AFTER = 0.6
FENCE_EXIT_CODE = 75  # EX_TEMPFAIL: a supervisor should start it again


def default_executor_id() -> str:
    """Unique per process: two processes never share runs by accident."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def fence_exit(reason: str) -> None:
    """The default fence: a worker that lost its lease exits at once, so no step of a run
    another worker may now own executes here."""
    logger.critical("helix worker fenced: %s; exiting with code %d", reason, FENCE_EXIT_CODE)
    logging.shutdown()
    os._exit(FENCE_EXIT_CODE)


def recover_worker(database_url: str, executor_id: str, claimant: str) -> list[str]:
    """Hand a dead worker's unfinished runs back to the queues now, without waiting for a
    live worker's sweep (and again for a worker already recovered, for runs it left
    behind). Refused while the worker's lease is live: its runs are still its own."""
    with connect(database_url, autocommit=True) as conn:
        workers = {w.executor_id: w for w in sql.list_workers(conn)}
        worker = workers.get(executor_id)
        if worker is None:
            known = ", ".join(sorted(workers)) or "none"
            raise WorkerNotDeadError(f"No worker '{executor_id}' is registered (known: {known})")
        moved = sql.claim_and_requeue(conn, executor_id, claimant, force=True)
    if moved is None:
        raise WorkerNotDeadError(
            f"Worker '{executor_id}' (pid {worker.pid} on {worker.host}) is alive: its lease "
            f"of {worker.lease_seconds:g}s has not lapsed, so its runs are still its own"
        )
    return moved


class WorkerLease:
    """Register, heartbeat, fence, and recover lapsed workers, on one thread of its own."""

    def __init__(
        self,
        database_url: str,
        identity: sql.WorkerIdentity,
        *,
        on_fence: Callable[[str], None] = fence_exit,
        on_recovered: Callable[[str, list[str]], None] | None = None,
    ) -> None:
        self.database_url = database_url
        self.identity = identity
        self.lease = identity.lease_seconds
        self.interval = max(self.lease / 5, 0.05)
        self._on_fence = on_fence
        self._on_recovered = on_recovered
        self._renewed_at = time.monotonic()
        self._stop = threading.Event()
        self._fenced = False
        self._threads: list[threading.Thread] = []
        self._conn: psycopg.Connection[Any] | None = None

    # --- life cycle ------------------------------------------------------------

    def acquire(self, wait: bool = True) -> None:
        """Take the executor id. A live holder that stops heartbeating within one lease (a
        killed process restarting under its stable id) is taken over; one that goes on
        heartbeating is an error, never a silent takeover."""
        deadline = time.monotonic() + (self.lease + self.interval if wait else 0)
        with connect(self.database_url, autocommit=True) as conn:
            while True:
                if sql.register(conn, self.identity):
                    self._renewed_at = time.monotonic()
                    return
                holder = sql.holder(conn, self.identity.executor_id)
                if holder is None:
                    continue  # it stopped between the two statements
                if time.monotonic() >= deadline:
                    raise ExecutorIdInUseError(self.identity.executor_id, *holder)
                time.sleep(self.interval)

    def start(self) -> None:
        """Heartbeat and recover on one thread; watch the lease on another, so a hung
        connection cannot keep the fence from closing."""
        for target, name in ((self._heartbeat_loop, "heartbeat"), (self._watch, "fence")):
            thread = threading.Thread(target=target, name=f"helix-worker-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """Stop heartbeating and mark the worker stopped: its id is free at once, and its
        unfinished runs are handed back once its lease lapses."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=self.interval * 4)
        self._close()
        try:
            with connect(self.database_url, autocommit=True) as conn:
                sql.mark_stopped(conn, self.identity.executor_id)
        except psycopg.Error as exc:
            logger.warning("helix could not mark worker %s stopped: %s", self.identity, exc)

    def serve(self, agent_name: str) -> None:
        """Record an agent registered after launch among the agents this worker serves."""
        if agent_name in self.identity.agents:
            return
        agents = tuple(sorted({*self.identity.agents, agent_name}))
        self.identity = dataclasses.replace(self.identity, agents=agents)
        with connect(self.database_url, autocommit=True) as conn:
            sql.set_agents(conn, self.identity.executor_id, agents)

    # --- the fence ---------------------------------------------------------------

    def check(self) -> None:
        """Called before each step: a worker whose lease may have lapsed (a long stall, a
        lost database) executes nothing more. After a clean stop it no longer fences: DBOS
        is destroyed by then, so nothing this process runs can be checkpointed."""
        stale = time.monotonic() - self._renewed_at > self.lease * FENCE_AFTER
        if self._fenced or (stale and not self._stop.is_set()):
            self._fence("its lease was not renewed in time")

    def _fence(self, reason: str) -> None:
        self._fenced = True
        self._stop.set()
        self._on_fence(f"worker {self.identity.executor_id}: {reason}")

    def _watch(self) -> None:
        while not self._stop.wait(self.interval / 2):
            if time.monotonic() - self._renewed_at > self.lease * FENCE_AFTER:
                self._fence(f"no heartbeat for over {self.lease * FENCE_AFTER:.1f}s")
                return

    # --- heartbeat and recovery ----------------------------------------------------

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self.interval):
            started = time.monotonic()
            try:
                conn = self._connection()
                if not sql.heartbeat(conn, self.identity.executor_id):
                    self._fence("another worker declared it dead")
                    return
                self._renewed_at = started
                self.recover_lapsed(conn)
            except psycopg.Error as exc:
                logger.warning("helix worker heartbeat failed: %s", exc)
                self._close()

    def recover_lapsed(self, conn: psycopg.Connection[Any]) -> None:
        """Claim each lapsed worker of this application and version, and hand its runs
        back to the queues."""
        me = self.identity
        for dead in sql.expired_workers(conn, me.application_name, me.application_version):
            if dead == me.executor_id:
                continue
            moved = sql.claim_and_requeue(conn, dead, me.executor_id)
            if moved is None:
                continue  # another worker claimed it first
            logger.warning(
                "helix worker %s recovered dead worker %s: %d workflow(s) handed back",
                me.executor_id,
                dead,
                len(moved),
            )
            if self._on_recovered is not None:
                self._on_recovered(dead, moved)

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            timeout = max(1, int(self.lease * FENCE_AFTER / 2))
            self._conn = connect(
                self.database_url,
                autocommit=True,
                connect_timeout=timeout,
                options=f"-c statement_timeout={timeout * 1000}",
            )
        return self._conn

    def _close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._conn.close()
            self._conn = None
