"""SQL for runs of application versions no live worker runs (docs/upgrading.md).

DBOS recovers a workflow only in a process of the application version that started it.
A run started by a version that no live worker runs any more (an upgrade that changed the
version, a fleet that was drained) waits forever: answers to it are refused instead of
accepted in silence, and `doctor` and `helix-dbos runs --version` list such runs.
Which versions are served is `helix.version_served` (migration 0019): a worker that
executes runs and heartbeats; with no such worker at all, every version is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

SERVED_VERSIONS = (
    "SELECT DISTINCT application_version FROM helix.workers w "
    "WHERE helix.worker_heartbeats(w) ORDER BY application_version"
)
_RUN_VERSION = (
    "SELECT v.version, helix.version_served(v.version) "
    "FROM (SELECT helix.run_version(%(wid)s) AS version) v"
)
# Live runs (helix's row) whose workflow is still PENDING or ENQUEUED (DBOS's) and was
# started by a version no live worker runs.
_STRANDED = (
    "SELECT v.version, r.run_id, r.session_id, r.agent_name, r.status, w.workflow_status "
    "FROM helix.runs r CROSS JOIN LATERAL helix.run_worker(r.workflow_id) w "
    "CROSS JOIN LATERAL (SELECT helix.run_version(r.workflow_id) AS version) v "
    "WHERE r.status IN ('running', 'waiting', 'paused') "
    "AND w.workflow_status IN ('PENDING', 'ENQUEUED') "
    "AND NOT helix.version_served(v.version) "
    "AND (%(version)s::text IS NULL OR v.version = %(version)s) "
    "ORDER BY v.version, r.started_at, r.run_id"
)


@dataclass(frozen=True)
class RunVersion:
    """The version that started a run's workflow (None: DBOS has no row for it yet),
    and whether a live worker runs that version."""

    version: str | None
    served: bool


@dataclass(frozen=True)
class StrandedRun:
    """A live run that no process will resume: its version has no live worker."""

    version: str
    run_id: str
    session_id: str
    agent_name: str
    status: str
    workflow_status: str


def run_version_sync(conn: psycopg.Connection[Any], workflow_id: str) -> RunVersion:
    """From a process whose DBOS tables are in this database (the CLI's)."""
    row = conn.execute(_RUN_VERSION, {"wid": workflow_id}).fetchone()
    return RunVersion(row[0], bool(row[1])) if row else RunVersion(None, True)


def served_versions_sync(conn: psycopg.Connection[Any]) -> list[str]:
    return [r[0] for r in conn.execute(SERVED_VERSIONS).fetchall()]


def stranded_runs(conn: psycopg.Connection[Any], version: str | None = None) -> list[StrandedRun]:
    """Live runs started by a version no live worker runs (`version`: of that one only)."""
    rows = conn.execute(_STRANDED, {"version": version}).fetchall()
    return [StrandedRun(*r) for r in rows]
