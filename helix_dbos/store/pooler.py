"""Running behind a connection pooler (PgBouncer in transaction mode, managed services'
pooled URLs): which of helix's habits a pooled server connection breaks, and how helix
does without them.

A transaction pooler lends a server connection for one transaction only, so nothing
may outlive a transaction on the server side: no server-side prepared statement
(psycopg prepares a statement after 5 executions; `prepare_threshold=None` stops it), no
session-level advisory lock (helix takes transaction-level ones instead), no LISTEN
(DBOS polls for messages instead; helix's own listener uses `listen_url`, a direct
connection, when one is given), and no `application_name` or backend pid that means
anything (a worker is dead when its lease lapses; with a direct URL its heartbeat runs
there and an early death is still seen).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import psycopg

from helix_dbos.store.database import connect, libpq_url

TRANSACTION = "transaction"
POOLER_MODES = (TRANSACTION,)
# How often DBOS looks for a message or an event its waiters wait for, behind a pooler
# (LISTEN does not cross one): the longest an approval takes to reach its run.
DEFAULT_POLL_SECONDS = 0.5
ADMIN_DATABASE = "pgbouncer"  # PgBouncer's console, which answers SHOW VERSION


@dataclass(frozen=True)
class PoolerSettings:
    """How helix reaches PostgreSQL: directly (`mode` None) or through a pooler."""

    mode: str | None = None
    listen_url: str | None = None  # a direct URL for LISTEN and the worker's heartbeat
    poll_seconds: float = DEFAULT_POLL_SECONDS

    @property
    def pooled(self) -> bool:
        return self.mode is not None

    def psycopg_kwargs(self) -> dict[str, Any]:
        """Connection arguments for helix's and DBOS's pools (none without a pooler:
        psycopg's prepared statements save a parse per statement on the hot path)."""
        return {"prepare_threshold": None} if self.pooled else {}

    def listen_where(self, database_url: str) -> tuple[str | None, float | None]:
        """Where helix's own listener LISTENs (None: nowhere) and the longest a waiter
        then sleeps between re-checks (None: its own interval)."""
        if not self.pooled:
            return database_url, None
        if self.listen_url is not None:
            return self.listen_url, None
        return None, self.poll_seconds

    def describe(self) -> str:
        if not self.pooled:
            return "direct connections (no pooler)"
        listen = (
            "LISTEN and heartbeats on the direct listen URL"
            if self.listen_url
            else "no direct URL: stream readers poll, dead workers are seen by their lease"
        )
        return (
            f"behind a {self.mode}-mode pooler: no prepared statements, messages polled "
            f"every {self.poll_seconds:g}s, {listen}"
        )


DIRECT = PoolerSettings()


def pooler_settings(
    pooler: str | None = None,
    listen_database_url: str | None = None,
    poll_seconds: float | None = None,
) -> PoolerSettings:
    """The settings from `HelixDBOS`'s arguments, else HELIX_DB_POOLER,
    HELIX_LISTEN_DATABASE_URL and HELIX_POOLER_POLL_SECONDS."""
    mode = pooler or os.environ.get("HELIX_DB_POOLER") or None
    if mode is not None:
        mode = mode.strip().lower()
        if mode in ("", "none", "off"):
            mode = None
        elif mode not in POOLER_MODES:
            raise ValueError(
                f"pooler must be one of {', '.join(POOLER_MODES)} or none, not {mode!r}"
            )
    listen = listen_database_url or os.environ.get("HELIX_LISTEN_DATABASE_URL") or None
    poll = poll_seconds or float(os.environ.get("HELIX_POOLER_POLL_SECONDS", DEFAULT_POLL_SECONDS))
    if poll <= 0:
        raise ValueError("the pooler's poll interval must be positive")
    return PoolerSettings(mode, listen, poll)


def detect_pgbouncer(url: str, timeout: int = 3) -> str | None:
    """PgBouncer's version if `url` reaches one (its console answers SHOW VERSION to an
    admin or stats user), else None. Cheap: one connection, at launch and in doctor."""
    try:
        with psycopg.connect(
            libpq_url(url), dbname=ADMIN_DATABASE, autocommit=True, connect_timeout=timeout
        ) as conn:
            conn.prepare_threshold = None
            row = conn.execute("SHOW VERSION").fetchone()
    except psycopg.Error:
        return None
    text = str(row[0]) if row else ""
    return text if "pgbouncer" in text.lower() else None


def behind_proxy(conn: psycopg.Connection[Any], url: str) -> bool:
    """Whether the server answers on another port than the URL's: something (a pooler,
    a proxy, a port mapping) sits between. A hint only, so launch tries PgBouncer's
    console only then (a plain server would log the failed login at every launch)."""
    row = conn.execute("SELECT inet_server_port()").fetchone()
    server_port = row[0] if row else None
    url_port = conn.info.port
    over_tcp = url_port is not None and not str(conn.info.host).startswith("/")
    if server_port is None:  # the server sees a Unix socket where we dialled TCP
        return over_tcp
    return over_tcp and int(server_port) != int(url_port)


def pooler_warning(url: str, settings: PoolerSettings) -> str | None:
    """What to tell a user whose URL reaches PgBouncer while helix is not set up for a
    pooler (None when nothing is wrong or nothing is known)."""
    if settings.pooled:
        return None
    with connect(url, autocommit=True) as conn:
        if not behind_proxy(conn, url):
            return None
    version = detect_pgbouncer(url)
    if version is None:
        return None
    return (
        f"the database URL reaches {version}: in transaction mode helix needs "
        "pooler='transaction' (HELIX_DB_POOLER=transaction), see docs/poolers.md"
    )
