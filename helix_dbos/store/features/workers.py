"""SQL for the fleet: the `helix.workers` registry and the hand-back of a dead worker's runs.

Plain psycopg on the caller's connection: the heartbeat runs in its own thread on its
own connection, so that a busy async pool never delays a lease renewal. Every time is
the database's clock (`now()`), so the processes' clocks never have to agree.

A worker is dead once its lease lapsed, or sooner once its heartbeat connection is gone
from the server (`pg_stat_activity`, by the connection's application name) and it has
missed two heartbeats: a killed process's connections close with it, while a live one
whose connection dropped reconnects and renews within one heartbeat. A cleanly stopped
worker executes nothing any more, so its unfinished runs can be handed back at once.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

# DBOS dequeues a workflow only from the queue named on its row. A recovered agent run goes
# to its agent's queue, which only processes serving that agent listen to; anything else
# goes where DBOS's own recovery would send it.
DBOS_RECOVERY_QUEUE = "_dbos_internal_queue"
AGENT_WORKFLOW = "helix.agent_run"
# Rows of workers that stopped or died (and hold no unfinished run) are deleted after this.
PRUNE_AFTER_SECONDS = 3600.0
HEARTBEAT_APP_PREFIX = "helix-hb:"


def heartbeat_seconds(lease_seconds: float) -> float:
    """How often a worker renews its lease: a fifth of it, at most every second (a
    heartbeat is one small UPDATE; a short period makes a dead worker's death quick to
    tell, see `DEAD`)."""
    return max(min(lease_seconds / 5, 1.0), 0.05)


def heartbeat_application_name(executor_id: str) -> str:
    """The heartbeat connection's `application_name` (at most 63 bytes, so a digest):
    other workers find it in `pg_stat_activity` while the worker's connection is open."""
    return HEARTBEAT_APP_PREFIX + hashlib.md5(executor_id.encode()).hexdigest()


# The worker's heartbeat connection is open on the server (an alias `w` for the row).
_CONNECTED = (
    "EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.datname = current_database() "
    f"AND a.application_name = '{HEARTBEAT_APP_PREFIX}' || md5(w.executor_id))"
)
LAPSED = "w.heartbeat_at < now() - make_interval(secs => w.lease_seconds)"
# Two heartbeats missed (see `heartbeat_seconds`), and half a second for the round trip.
_SILENT = (
    "w.heartbeat_at < now() - make_interval(secs => "
    "2 * GREATEST(LEAST(w.lease_seconds / 5, 1.0), 0.05) + 0.5)"
)
# Whether the worker may be declared dead: stopped cleanly, lease lapsed, or (`early`)
# its connection is gone and it missed two heartbeats, or its process is known to be
# gone (`pid_gone`: the claimant runs on its host and found no such pid).
DEAD = (
    f"(w.state = 'stopped' OR {LAPSED} OR (%(early)s AND NOT {_CONNECTED} "
    f"AND ({_SILENT} OR %(pid_gone)s)))"
)


@dataclass(frozen=True)
class WorkerIdentity:
    executor_id: str
    application_name: str
    application_version: str
    host: str
    pid: int
    agents: tuple[str, ...]
    executes_runs: bool
    lease_seconds: float


@dataclass(frozen=True)
class WorkerRow:
    executor_id: str
    application_name: str
    application_version: str
    host: str
    pid: int
    agents: list[str]
    executes_runs: bool
    state: str  # live | stopped | dead; `expired` says whether a live lease has lapsed
    expired: bool
    lease_seconds: float
    started_at: datetime
    heartbeat_at: datetime
    recovered_by: str | None
    recovered_at: datetime | None
    recovered_runs: int
    pending_runs: int


def register(
    conn: psycopg.Connection[Any], me: WorkerIdentity, *, pid_gone: bool = False, early: bool = True
) -> bool:
    """Take the executor id unless a live worker heartbeats under it; True if taken.
    `pid_gone`: the holder runs on this host and its process is gone. Without `early`
    (behind a transaction pooler, where `pg_stat_activity` tells nothing) only a lapsed
    lease or a clean stop frees the id."""
    row = conn.execute(
        f"""
        INSERT INTO helix.workers AS w (executor_id, application_name, application_version,
            host, pid, agents, executes_runs, lease_seconds)
        VALUES (%(id)s, %(app)s, %(version)s, %(host)s, %(pid)s, %(agents)s, %(executes)s,
            %(lease)s)
        ON CONFLICT (executor_id) DO UPDATE SET
            application_name = excluded.application_name,
            application_version = excluded.application_version,
            host = excluded.host, pid = excluded.pid, agents = excluded.agents,
            executes_runs = excluded.executes_runs, lease_seconds = excluded.lease_seconds,
            state = 'live', started_at = now(), heartbeat_at = now(),
            recovered_by = NULL, recovered_at = NULL, recovered_runs = 0
        WHERE w.state <> 'live' OR {DEAD}
        RETURNING executor_id
        """,
        {**_identity_params(me), "early": early, "pid_gone": pid_gone},
    ).fetchone()
    return row is not None


@dataclass(frozen=True)
class Holder:
    """A worker row that may be dead: where its process ran, and whether its heartbeat
    connection is still open on the server."""

    executor_id: str
    host: str
    pid: int
    state: str
    connected: bool


def holder(conn: psycopg.Connection[Any], executor_id: str) -> Holder | None:
    """The live worker holding `executor_id`, if any."""
    row = conn.execute(
        f"SELECT executor_id, host, pid, state, {_CONNECTED} FROM helix.workers w "
        "WHERE executor_id = %s AND state = 'live'",
        (executor_id,),
    ).fetchone()
    return Holder(*row) if row else None


def heartbeat(conn: psycopg.Connection[Any], executor_id: str) -> bool:
    """Renew the lease; False if the row is no longer ours to renew (claimed as dead)."""
    row = conn.execute(
        "UPDATE helix.workers SET heartbeat_at = now() "
        "WHERE executor_id = %s AND state = 'live' RETURNING 1",
        (executor_id,),
    ).fetchone()
    return row is not None


def set_agents(conn: psycopg.Connection[Any], executor_id: str, agents: tuple[str, ...]) -> None:
    conn.execute(
        "UPDATE helix.workers SET agents = %s WHERE executor_id = %s", (list(agents), executor_id)
    )


def mark_stopped(conn: psycopg.Connection[Any], executor_id: str) -> None:
    conn.execute(
        "UPDATE helix.workers SET state = 'stopped' WHERE executor_id = %s AND state = 'live'",
        (executor_id,),
    )


def claimable_workers(
    conn: psycopg.Connection[Any], application_name: str, application_version: str
) -> list[Holder]:
    """Workers of this application and version whose runs were not handed back yet and
    that may be dead: stopped, lease lapsed, or heartbeat connection gone (a caller on
    the same host tells by the pid; `claim_and_requeue` decides)."""
    rows = conn.execute(
        f"""
        SELECT executor_id, host, pid, state, {_CONNECTED} FROM helix.workers w
        WHERE application_name = %s AND application_version = %s
          AND (state = 'live' OR (state = 'stopped' AND recovered_at IS NULL))
          AND (state = 'stopped' OR {LAPSED} OR NOT {_CONNECTED})
        ORDER BY heartbeat_at
        """,
        (application_name, application_version),
    ).fetchall()
    return [Holder(*r) for r in rows]


@dataclass(frozen=True)
class Claimed:
    """A worker declared dead (or a stopped one recovered) and the workflows handed back."""

    executor_id: str
    state: str  # dead, or stopped for a worker that stopped cleanly
    workflow_ids: list[str]


def _identity_params(me: WorkerIdentity) -> dict[str, Any]:
    return {
        "id": me.executor_id,
        "app": me.application_name,
        "version": me.application_version,
        "host": me.host,
        "pid": me.pid,
        "agents": list(me.agents),
        "executes": me.executes_runs,
        "lease": me.lease_seconds,
    }
