"""Forward-only SQL migrations for the `helix` schema.

Plain numbered .sql files (`NNNN_name.sql`), applied in order, each in its own transaction
together with the row that records it, under a session advisory lock so that several
processes starting at once (workers, the API server, the CLI) apply each file exactly once.
A recorded file whose content later changed is an error, not a silent skip: the database
would no longer match what the code believes the schema to be.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from .database import connect

SCHEMA = "helix"
TABLE = f"{SCHEMA}.schema_migrations"

# Fixed key for pg_advisory_lock: first 8 bytes of sha256("helix_dbos.migrations"), signed.
LOCK_KEY = int.from_bytes(hashlib.sha256(b"helix_dbos.migrations").digest()[:8], "big", signed=True)

_FILE_RE = re.compile(r"^(\d{4})_[A-Za-z0-9_\-]+\.sql$")

_BOOTSTRAP = f"""
CREATE SCHEMA IF NOT EXISTS {SCHEMA};
CREATE TABLE IF NOT EXISTS {TABLE} (
    version    text PRIMARY KEY,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
"""


class MigrationError(RuntimeError):
    """The migrations folder or the database's migration history is inconsistent."""


class MigrationChecksumError(MigrationError):
    """A migration already applied to the database has since been edited."""


@dataclass(frozen=True)
class Migration:
    version: str  # file name without .sql, e.g. "0001_helix_schema"
    path: Path
    sql: str
    checksum: str


def migrations_dir() -> Path:
    """The SQL folder: packaged copy in a wheel (helix_dbos/_migrations), else the repo's."""
    package_root = Path(__file__).resolve().parent.parent
    for candidate in (package_root / "_migrations", package_root.parent / "migrations"):
        if candidate.is_dir():
            return candidate
    raise MigrationError(
        f"No migrations folder found (looked in {package_root / '_migrations'} "
        f"and {package_root.parent / 'migrations'})"
    )


def _checksum(text: str) -> str:
    # Normalise line endings so a CRLF checkout does not look like an edited migration.
    return hashlib.sha256(text.replace("\r\n", "\n").encode("utf-8")).hexdigest()


def load_migrations(directory: str | Path | None = None) -> list[Migration]:
    """All NNNN_name.sql files in order; other files are ignored, duplicate numbers refused."""
    folder = Path(directory) if directory is not None else migrations_dir()
    found: dict[str, Path] = {}
    for path in sorted(folder.iterdir()):
        match = _FILE_RE.match(path.name)
        if not match or not path.is_file():
            continue
        number = match.group(1)
        if number in found:
            raise MigrationError(
                f"Two migrations share number {number}: {found[number].name} and {path.name}"
            )
        found[number] = path
    migrations = []
    for number in sorted(found):
        path = found[number]
        text = path.read_text(encoding="utf-8")
        migrations.append(Migration(path.stem, path, text, _checksum(text)))
    return migrations


def apply_migrations(
    url: str, *, directory: str | Path | None = None, pooled: bool = False
) -> list[str]:
    """Apply every migration not yet recorded; return the versions applied by this call.

    Checksums of already-applied files are verified before anything new runs. `pooled`
    (a transaction pooler's URL): all of it in one transaction, under a transaction-level
    lock, since a session-level one would stay behind on the server connection the
    pooler lent (each migration is then a savepoint of that transaction).
    """
    if pooled:
        return _apply_in_one_transaction(url, load_migrations(directory))
    migrations = load_migrations(directory)
    with connect(url, autocommit=True) as conn:
        # Session-level lock: held across the per-file transactions below, released on
        # unlock or, if this process dies, when its connection drops.
        conn.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,))
        try:
            return _apply_under_lock(conn, migrations)
        finally:
            # Best effort: a broken connection has released the lock already, and an
            # unlock failure must not hide the error that got us here.
            with contextlib.suppress(psycopg.Error):
                conn.execute("SELECT pg_advisory_unlock(%s)", (LOCK_KEY,))


def _apply_in_one_transaction(url: str, migrations: list[Migration]) -> list[str]:
    with connect(url, autocommit=True) as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        return _apply_under_lock(conn, migrations)


def _apply_under_lock(conn: psycopg.Connection[Any], migrations: list[Migration]) -> list[str]:
    """Verify the applied migrations' checksums, then apply the rest, each in a
    transaction (a savepoint inside an outer one) with its record."""
    conn.execute(_BOOTSTRAP)
    rows = conn.execute(f"SELECT version, checksum FROM {TABLE}").fetchall()
    recorded = {version: checksum for version, checksum in rows}
    for migration in migrations:
        stored = recorded.get(migration.version)
        if stored is not None and stored != migration.checksum:
            raise MigrationChecksumError(
                f"Migration {migration.path.name} was changed after it was applied "
                f"(recorded checksum {stored[:12]}, file now {migration.checksum[:12]}); "
                "add a new migration instead of editing an applied one"
            )
    applied: list[str] = []
    for migration in migrations:
        if migration.version in recorded:
            continue
        with conn.transaction():
            conn.execute(migration.sql)
            conn.execute(
                f"INSERT INTO {TABLE} (version, checksum) VALUES (%s, %s)",
                (migration.version, migration.checksum),
            )
        applied.append(migration.version)
    return applied


async def apply_migrations_async(url: str, *, directory: str | Path | None = None) -> list[str]:
    """apply_migrations off the event loop (it blocks on the lock and on DDL)."""
    return await asyncio.to_thread(apply_migrations, url, directory=directory)


def applied_migrations(url: str) -> list[str]:
    """Versions recorded in the database, in order; empty if never migrated."""
    with connect(url) as conn:
        exists = conn.execute("SELECT to_regclass(%s)", (TABLE,)).fetchone()
        if not exists or exists[0] is None:
            return []
        rows = conn.execute(f"SELECT version FROM {TABLE} ORDER BY version").fetchall()
        return [row[0] for row in rows]
