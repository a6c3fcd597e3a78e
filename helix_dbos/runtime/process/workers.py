"""A worker's lease: its row in `helix.workers`, its heartbeat, its fence, and the
recovery of dead workers.

Why a lease and a fence: DBOS 3.4 recovers only the workflows of the executor id a
process starts under. A worker that dies for good would leave its runs PENDING forever,
and resuming the runs of a worker that is merely slow runs their tools twice. So each
worker renews a lease on its own connection; a live worker of the same application
claims a dead one (one claimant: a conditional UPDATE) and hands its runs back to DBOS's
queues.

The fence: a worker that cannot renew its lease (the database is down, or out of its
reach) starts no new step and waits; nothing exits. When the database answers again
it learns whether its lease was claimed meanwhile. If not, it carries on. If so, the
runs it was executing belong to other executions now: each one's next step finds so
and stops without running anything (`Fence`), and every write it might still attempt
is refused in its own statement (`helix.owns`), like DBOS's checkpoints; the
worker registers again and takes new work.
"""

from __future__ import annotations

import asyncio
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
from helix_dbos.runtime.dbos import dbos_internals, worker_workflows
from helix_dbos.store.database import connect
from helix_dbos.store.features import workers as sql

logger = logging.getLogger("helix_dbos.workers")

DEFAULT_LEASE_SECONDS = 15.0
# A worker starts no new step once this share of its lease passed without a renewal
# (a hung connection, a stalled process), or as soon as a renewal fails.
FENCE_AFTER = 0.6
FENCE_EXIT_CODE = 75  # EX_TEMPFAIL: only when another live process took this executor id
PRUNE_EVERY_SECONDS = 60.0


def default_executor_id() -> str:
    """Unique per process: two processes never share runs by accident."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def fence_exit(reason: str) -> None:
    """A worker whose executor id another live process took exits at once: two processes
    under one id would execute the same runs."""
    logger.critical("helix worker fenced: %s; exiting with code %d", reason, FENCE_EXIT_CODE)
    logging.shutdown()
    os._exit(FENCE_EXIT_CODE)


def pid_gone(host: str, pid: int) -> bool:
    """Whether a worker that ran on `host` as `pid` is known to be gone: it ran on this
    host and no process has its pid (or this process has it: a container restarted
    with the same pid). A pid reused by another process counts as alive (the safe side)."""
    if host != socket.gethostname():
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # it exists, owned by someone else
        return False
    return False


def _gone(worker: sql.Holder) -> bool:
    """Known dead: its connection closed, and its process gone from this host."""
    return not worker.connected and pid_gone(worker.host, worker.pid)


def _why_dead(worker: sql.Holder, gone: bool) -> str:
    if gone:
        return f"pid {worker.pid} on this host is gone"
    if worker.state == "stopped":
        return "it stopped"
    return f"pid {worker.pid} on {worker.host}: its lease lapsed or its connection closed"


def recover_worker(database_url: str, executor_id: str, claimant: str) -> list[str]:
    """Hand a dead worker's unfinished runs back to the queues now, without waiting for a
    live worker's sweep (and again for a worker already recovered, for runs it left
    behind). Refused while the worker's lease is live: its runs are still its own."""
    with connect(database_url, autocommit=True) as conn:
        workers = {w.executor_id: w for w in worker_workflows.list_workers(conn)}
        worker = workers.get(executor_id)
        if worker is None:
            known = ", ".join(sorted(workers)) or "none"
            raise WorkerNotDeadError(f"No worker '{executor_id}' is registered (known: {known})")
        claimed = worker_workflows.claim_and_requeue(
            conn, executor_id, claimant, force=True, early=False
        )
    if claimed is None:
        raise WorkerNotDeadError(
            f"Worker '{executor_id}' (pid {worker.pid} on {worker.host}) is alive: its lease "
            f"of {worker.lease_seconds:g}s has not lapsed, so its runs are still its own"
        )
    return claimed.workflow_ids


class WorkerLease:
    """Register, heartbeat, fence, and recover dead workers, on one thread of its own."""

    def __init__(
        self,
        database_url: str,
        identity: sql.WorkerIdentity,
        *,
        on_recovered: Callable[[str, list[str]], None] | None = None,
        heartbeat_url: str | None = None,
        early_death: bool = True,
    ) -> None:
        self.database_url = database_url
        # The heartbeat's connection: a direct one behind a pooler, if given, so that
        # `pg_stat_activity` shows it while this process lives.
        self.heartbeat_url = heartbeat_url or database_url
        # Whether a worker whose heartbeat connection closed is dead before its lease
        # lapses: not behind a pooler without a direct heartbeat URL, where a pooled
        # connection's `application_name` and backend pid mean nothing.
        self.early_death = early_death
        self.identity = identity
        self.lease = identity.lease_seconds
        self.interval = sql.heartbeat_seconds(self.lease)
        self._on_recovered = on_recovered
        self._renewed_at = time.monotonic()
        # Since when renewals have been continuous: a worker that was cut off itself
        # gives the others two heartbeats to come back before it judges any of them.
        self._connected_since = time.monotonic()
        self._healthy = True
        self._lost_since: float | None = None  # the first failed renewal of an outage
        self._pruned_at = 0.0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._conn: psycopg.Connection[Any] | None = None
        # Bumped whenever this worker finds its lease claimed: executions that began
        # before may no longer own their workflows (`Fence`).
        self.epoch = 0
        self.predecessor: str | None = None  # what `acquire` took over, to say so once

    # --- life cycle ------------------------------------------------------------

    def acquire(self, wait: bool = True) -> None:
        """Take the executor id. A holder known to be gone (its connection closed, and it
        ran on this host under a pid that no longer exists) is taken over at once; a live
        holder that stops heartbeating within one lease (a killed process elsewhere) is
        taken over then; one that goes on heartbeating is an error."""
        deadline = time.monotonic() + (self.lease + self.interval if wait else 0)
        with connect(self.database_url, autocommit=True) as conn:
            holder = sql.holder(conn, self.identity.executor_id)  # a previous life's row
            gone = holder is not None and self._gone(holder)
            while True:
                if sql.register(conn, self.identity, pid_gone=gone, early=self.early_death):
                    self._renewed_at = time.monotonic()
                    if holder is not None:
                        self.predecessor = _why_dead(holder, gone)
                    return
                holder = sql.holder(conn, self.identity.executor_id)
                if holder is None:
                    continue  # it stopped between the two statements
                if not gone and self._gone(holder):
                    gone = True
                    continue
                if time.monotonic() >= deadline:
                    raise ExecutorIdInUseError(self.identity.executor_id, holder.host, holder.pid)
                time.sleep(self.interval)

    def start(self) -> None:
        """Heartbeat and recover on a thread of its own."""
        thread = threading.Thread(
            target=self._heartbeat_loop, name="helix-worker-heartbeat", daemon=True
        )
        thread.start()
        self._threads.append(thread)

    def stop(self) -> None:
        """Stop heartbeating and mark the worker stopped: its id is free at once, and any
        run it leaves unfinished is handed back by the next live worker's sweep."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=self.interval * 4 + 5)
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

    def usable(self) -> bool:
        """Whether steps may start: the last renewal succeeded and is recent. After a
        clean stop it no longer fences (DBOS is destroyed by then)."""
        if self._stop.is_set():
            return True
        fresh = time.monotonic() - self._renewed_at <= self.lease * FENCE_AFTER
        return self._healthy and fresh

    async def wait_usable(self) -> None:
        """Wait (without blocking the event loop) until steps may start."""
        while not self.usable():
            await asyncio.sleep(self.interval / 2)

    # --- heartbeat and recovery ----------------------------------------------------

    def take_over_predecessors(self) -> list[sql.Claimed]:
        """At launch: claim every worker of this application that ran on this host under
        a pid that no longer exists (a crash before this restart), and hand its runs back
        now, instead of waiting for its lease to lapse."""
        with connect(self.database_url, autocommit=True) as conn:
            return self._claim_dead(conn, same_host_only=True)

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self.interval):
            started = time.monotonic()
            try:
                conn = self._connection()
                if not sql.heartbeat(conn, self.identity.executor_id):
                    self._claimed(conn)
                self._renewed(started)
                if started - self._connected_since >= 2 * self.interval + 0.5:
                    self._claim_dead(conn, same_host_only=False)
                if started - self._pruned_at >= PRUNE_EVERY_SECONDS:
                    self._pruned_at = started
                    worker_workflows.prune(conn)
            except psycopg.Error as exc:
                self._lost(started, exc)
                self._close()

    def _renewed(self, started: float) -> None:
        # Cut off itself (a renewal failed, or none for two heartbeats): the others may
        # be reconnecting too, so it judges none of them for two heartbeats.
        if self._lost_since is not None or started - self._renewed_at > 2 * self.interval + 0.5:
            self._connected_since = started
        if self._lost_since is not None:
            logger.warning(
                "helix worker %s reached the database again after %.1fs; resuming",
                self.identity.executor_id,
                started - self._lost_since,
            )
            self._lost_since = None
        self._renewed_at = started
        self._healthy = True

    def _lost(self, started: float, exc: BaseException) -> None:
        self._healthy = False
        if self._lost_since is None:
            self._lost_since = started
            logger.warning(
                "helix worker %s cannot reach the database (%s): it starts no new step "
                "until it answers",
                self.identity.executor_id,
                " ".join(str(exc).split()),
            )

    def _claimed(self, conn: psycopg.Connection[Any]) -> None:
        """Another worker declared this one dead while it could not renew: its runs were
        handed back and continue elsewhere. Drop them here (see `Fence`) and register again."""
        self.epoch += 1
        if not sql.register(conn, self.identity, early=self.early_death):
            fence_exit(
                f"worker {self.identity.executor_id}: another live process took its executor id"
            )
        logger.warning(
            "helix worker %s was declared dead while it could not reach the database: "
            "the runs it was executing continue on other workers and are dropped here",
            self.identity.executor_id,
        )

    def _claim_dead(
        self, conn: psycopg.Connection[Any], *, same_host_only: bool
    ) -> list[sql.Claimed]:
        """Claim each dead worker of this application and version, and hand its runs back
        to the queues; says so once per worker whose runs it handed back."""
        me = self.identity
        claims: list[sql.Claimed] = []
        for dead in sql.claimable_workers(conn, me.application_name, me.application_version):
            if dead.executor_id == me.executor_id:
                continue
            gone = self._gone(dead)
            if same_host_only and not gone:
                continue
            claimed = worker_workflows.claim_and_requeue(
                conn, dead.executor_id, me.executor_id, pid_gone=gone, early=self.early_death
            )
            if claimed is None:
                continue  # alive after all, or another worker claimed it first
            claims.append(claimed)
            if claimed.workflow_ids:  # a stopped worker that left nothing is not news
                logger.warning(
                    "helix worker %s took over %d unfinished run(s) of worker %s (%s)",
                    me.executor_id,
                    len(claimed.workflow_ids),
                    dead.executor_id,
                    _why_dead(dead, gone),
                )
            if self._on_recovered is not None:
                self._on_recovered(dead.executor_id, claimed.workflow_ids)
        return claims

    def _gone(self, worker: sql.Holder) -> bool:
        return self.early_death and _gone(worker)

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            timeout = max(1, int(self.lease * FENCE_AFTER / 2))
            # A pooler refuses the `options` startup parameter (PgBouncer: "unsupported
            # startup parameter"); a heartbeat through one goes without its timeout.
            through_pooler = not self.early_death
            self._conn = connect(
                self.heartbeat_url,
                autocommit=True,
                connect_timeout=timeout,
                application_name=sql.heartbeat_application_name(self.identity.executor_id),
                **({} if through_pooler else {"options": f"-c statement_timeout={timeout * 1000}"}),
            )
        return self._conn

    def _close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._conn.close()
            self._conn = None


class Fence:
    """Awaited before each step (`Runtime.lease_check`): waits while this worker cannot
    reach the database, and once its lease was claimed, stops an execution whose workflow
    another execution owns now, before it runs or writes anything (DBOS parks it)."""

    def __init__(self, lease: WorkerLease, owns: Callable[[str, str], Any]) -> None:
        self._lease = lease
        self._owns = owns  # async (workflow_id, owner token) -> bool
        self._checked: dict[tuple[str, str], int] = {}  # execution -> epoch it was checked at

    async def __call__(self) -> None:
        lease = self._lease
        await lease.wait_usable()
        if lease.epoch == 0:
            return
        owner = dbos_internals.execution_owner()
        if owner is None or self._checked.get(owner) == lease.epoch:
            return
        if not await self._owns(*owner):
            raise dbos_internals.WorkflowNotOwnedError(owner[0])
        if len(self._checked) > 10_000:
            self._checked.clear()
        self._checked[owner] = lease.epoch
