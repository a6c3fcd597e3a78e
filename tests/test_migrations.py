"""Migrations and the `migrate` CLI, each test on its own throwaway database."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import forkserver
import psycopg
import pytest
from psycopg import sql

from helix_dbos.cli import main
from helix_dbos.store.database import connect, embedded_database_url, with_database
from helix_dbos.store.migrations import (
    MigrationChecksumError,
    MigrationError,
    applied_migrations,
    apply_migrations,
    apply_migrations_async,
    migrations_dir,
)

REPO = Path(__file__).resolve().parent.parent
FIRST = "0001_helix_schema"
SHIPPED = sorted(path.stem for path in migrations_dir().glob("[0-9][0-9][0-9][0-9]_*.sql"))
HELIX_TABLES = {
    "sessions",
    "runs",
    "messages",
    "tool_calls",
    "usage_rows",  # `helix.usage` is a view over it and the messages (migration 0027)
    "stream_chunks",
    "memory",
    "progress",
    "workers",
    "companions",
    "mcp_tool_lists",
    "start_keys",
    "remote_children",
    "checkpoints",
    "memories",
    "memory_recalls",
    "session_resources",
    "queued_messages",
    "rolled_back_messages",
    "rolled_back_usage",
    "schedule_firings",
    "summaries",
    "handoffs",
    "blobs",
}


@pytest.fixture(scope="module")
def server_url(embedded_dir: Path) -> str:
    """A real server: $HELIX_TEST_DATABASE_URL, else this session's embedded server."""
    return os.environ.get("HELIX_TEST_DATABASE_URL") or embedded_database_url(embedded_dir)


def _drop(server_url: str, name: str) -> None:
    with connect(server_url, dbname="postgres", autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@pytest.fixture
def db_name(server_url: str):
    """A fresh database name (not created); dropped after the test if it exists."""
    name = f"helix_mig_{uuid.uuid4().hex[:12]}"
    yield name
    _drop(server_url, name)


@pytest.fixture
def db_url(server_url: str, db_name: str) -> str:
    """A freshly created, empty database."""
    with connect(server_url, dbname="postgres", autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db_name)))
    return with_database(server_url, db_name)


@pytest.fixture
def mig_dir(tmp_path: Path) -> Path:
    """A private copy of the real migrations, for tests that add or edit files."""
    folder = tmp_path / "migrations"
    shutil.copytree(migrations_dir(), folder)
    return folder


def _helix_tables(url: str) -> set[str]:
    with connect(url) as conn:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = 'helix' AND table_type = 'BASE TABLE'"
        ).fetchall()
    return {row[0] for row in rows}


def _recorded_count(url: str) -> int:
    with connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM helix.schema_migrations").fetchone()
    assert row is not None
    return int(row[0])


# --- apply ---------------------------------------------------------------------------


def test_migrations_dir_is_the_repo_folder_in_a_checkout() -> None:
    assert (migrations_dir() / f"{FIRST}.sql").is_file()


def test_fresh_apply_creates_every_table(db_url: str) -> None:
    assert applied_migrations(db_url) == []
    assert apply_migrations(db_url) == SHIPPED
    assert _helix_tables(db_url) == HELIX_TABLES | {"schema_migrations"}
    assert applied_migrations(db_url) == SHIPPED
    with connect(db_url) as conn:
        views = conn.execute(
            "SELECT table_name FROM information_schema.views WHERE table_schema = 'helix'"
        ).fetchall()
    assert ("usage",) in views


def test_second_apply_is_a_no_op(db_url: str) -> None:
    apply_migrations(db_url)
    assert apply_migrations(db_url) == []
    assert _recorded_count(db_url) == len(SHIPPED)


def test_concurrent_apply_runs_each_migration_once(db_url: str) -> None:
    workers = 8
    barrier = threading.Barrier(workers)
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def worker() -> None:
        barrier.wait()
        try:
            results.append(apply_migrations(db_url))
        except BaseException as exc:  # surfaced by the asserts below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert len(results) == workers
    assert sorted(v for applied in results for v in applied) == SHIPPED
    assert _recorded_count(db_url) == len(SHIPPED)


async def test_async_wrapper_applies(db_url: str) -> None:
    assert await apply_migrations_async(db_url) == SHIPPED
    assert await apply_migrations_async(db_url) == []


def test_edited_migration_raises_checksum_error(db_url: str, mig_dir: Path) -> None:
    apply_migrations(db_url, directory=mig_dir)
    path = mig_dir / f"{FIRST}.sql"
    path.write_text(path.read_text() + "\n-- edited after the fact\n")
    with pytest.raises(MigrationChecksumError, match=f"{FIRST}.sql"):
        apply_migrations(db_url, directory=mig_dir)


def test_crlf_checkout_is_not_an_edit(db_url: str, mig_dir: Path) -> None:
    apply_migrations(db_url, directory=mig_dir)
    path = mig_dir / f"{FIRST}.sql"
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    assert apply_migrations(db_url, directory=mig_dir) == []


def test_new_migration_is_applied_after_existing_ones(db_url: str, mig_dir: Path) -> None:
    assert apply_migrations(db_url, directory=mig_dir) == SHIPPED
    (mig_dir / "0090_session_tags.sql").write_text(
        "ALTER TABLE helix.sessions ADD COLUMN tags text[] NOT NULL DEFAULT '{}';\n"
    )
    (mig_dir / "README.md").write_text("not a migration")
    assert apply_migrations(db_url, directory=mig_dir) == ["0090_session_tags"]
    assert applied_migrations(db_url) == [*SHIPPED, "0090_session_tags"]
    with connect(db_url) as conn:
        conn.execute("SELECT tags FROM helix.sessions LIMIT 0")  # fails if missing


def test_pending_migrations_apply_in_numeric_order(db_url: str, mig_dir: Path) -> None:
    # 0092 depends on 0091, which depends on 0001: wrong order would fail.
    (mig_dir / "0092_use_index.sql").write_text("CREATE INDEX runs_tag_idx ON helix.runs (tag);")
    (mig_dir / "0091_add_tag.sql").write_text("ALTER TABLE helix.runs ADD COLUMN tag text;")
    assert apply_migrations(db_url, directory=mig_dir) == [
        *SHIPPED,
        "0091_add_tag",
        "0092_use_index",
    ]


def test_failed_migration_rolls_back_and_is_not_recorded(db_url: str, mig_dir: Path) -> None:
    (mig_dir / "0090_broken.sql").write_text(
        "CREATE TABLE helix.half_done (id int);\nSELECT * FROM helix.no_such_table;\n"
    )
    with pytest.raises(psycopg.errors.UndefinedTable):
        apply_migrations(db_url, directory=mig_dir)
    assert applied_migrations(db_url) == SHIPPED  # each committed in its own transaction
    assert "half_done" not in _helix_tables(db_url)
    (mig_dir / "0090_broken.sql").write_text("CREATE TABLE helix.half_done (id int);\n")
    assert apply_migrations(db_url, directory=mig_dir) == ["0090_broken"]


def test_step_commit_keys_start_from_the_existing_rows(db_url: str, mig_dir: Path) -> None:
    """0002 and 0003 on a database already in use: counters and keys continue from what
    is there."""
    later = {path: path.read_text() for path in sorted(mig_dir.glob("000[23]_*.sql"))}
    assert [p.name for p in later] == ["0002_step_commit_keys.sql", "0003_step_head_key.sql"]
    for path in later:
        path.unlink()
    for path in mig_dir.glob("*.sql"):  # the later migrations play no part here
        if path.stem != FIRST:
            path.unlink()
    assert apply_migrations(db_url, directory=mig_dir) == [FIRST]
    with connect(db_url, autocommit=True) as conn:
        conn.execute("INSERT INTO helix.sessions (session_id, agent_name) VALUES ('s1', 'a')")
        conn.execute(
            "INSERT INTO helix.runs (run_id, session_id, workflow_id, agent_name, turn, status, "
            "step_count) VALUES ('r1', 's1', 'w1', 'a', 1, 'completed', 4)"
        )
        for seq in (1, 2, 3):
            conn.execute(
                "INSERT INTO helix.messages (session_id, seq, role, content) "
                "VALUES ('s1', %s, 'user', 'x')",
                (seq,),
            )
    for path, text in later.items():
        path.write_text(text)
    assert apply_migrations(db_url, directory=mig_dir) == [
        "0002_step_commit_keys",
        "0003_step_head_key",
    ]
    with connect(db_url) as conn:
        assert conn.execute("SELECT message_seq FROM helix.sessions").fetchall() == [(3,)]
        assert conn.execute("SELECT committed_step, committed_head FROM helix.runs").fetchall() == [
            (4, 4)
        ]


def test_usage_semantics_fix_rows_written_before(db_url: str, mig_dir: Path) -> None:
    """0006 on a database in use: Anthropic rows get their cached input tokens back in
    input_tokens, and failed calls stored as successes under the configured name become
    failures with no model; the meaning is on the columns."""
    migration = mig_dir / "0006_usage_semantics.sql"
    text = migration.read_text()
    migration.unlink()
    apply_migrations(db_url, directory=mig_dir)
    rows = [
        ("u1", "claude-sonnet-4-5-20250929", 40, 9, 1200, 300, True),
        ("u2", "gpt-4o-2024-08-06", 1500, 300, 1024, 0, True),
        ("u3", "openai:gpt-4o", 0, 0, 0, 0, True),
        ("u4", "llama3.1:8b", 0, 0, 0, 0, True),
    ]
    with connect(db_url, autocommit=True) as conn:
        for row in rows:
            conn.execute(
                "INSERT INTO helix.usage (usage_id, session_id, run_id, agent_name, step, kind, "
                "model, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, "
                "success) VALUES (%s, 's', 'r', 'a', 1, 'llm', %s, %s, %s, %s, %s, %s)",
                row,
            )
    migration.write_text(text)
    assert apply_migrations(db_url, directory=mig_dir) == ["0006_usage_semantics"]
    with connect(db_url) as conn:
        got = conn.execute(
            "SELECT usage_id, model, input_tokens, success FROM helix.usage ORDER BY usage_id"
        ).fetchall()
        comment = conn.execute(
            "SELECT col_description('helix.usage'::regclass, "
            "(SELECT attnum FROM pg_attribute WHERE attrelid = 'helix.usage'::regclass "
            "AND attname = 'input_tokens'))"
        ).fetchone()
    assert got == [
        ("u1", "claude-sonnet-4-5-20250929", 1540, True),
        ("u2", "gpt-4o-2024-08-06", 1500, True),
        ("u3", None, 0, False),
        ("u4", "llama3.1:8b", 0, True),
    ]
    assert comment is not None and "cached or not" in comment[0]


def test_duplicate_migration_numbers_are_refused(db_url: str, mig_dir: Path) -> None:
    (mig_dir / "0001_other.sql").write_text("SELECT 1;")
    with pytest.raises(MigrationError, match="0001"):
        apply_migrations(db_url, directory=mig_dir)
    assert applied_migrations(db_url) == []


# --- CLI -----------------------------------------------------------------------------


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HELIX_")}
    clean.update(env)
    return forkserver.run(
        [sys.executable, "-m", "helix_dbos.cli", *args],
        cwd=REPO,
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_migrate_creates_database_then_reports_up_to_date(
    server_url: str, db_name: str
) -> None:
    url = with_database(server_url, db_name)  # does not exist yet
    first = _cli("migrate", "--database-url", url)
    assert first.returncode == 0, first.stderr
    assert "Created database" in first.stdout
    assert FIRST in first.stdout
    assert applied_migrations(url) == SHIPPED
    with connect(url) as conn:  # and DBOS's tables, so a fleet's workers can start together
        assert conn.execute("SELECT to_regclass('dbos.workflow_status')").fetchone() == (
            "dbos.workflow_status",
        )

    second = _cli("migrate", "--database-url", url)
    assert second.returncode == 0, second.stderr
    assert "up to date" in second.stdout
    assert FIRST not in second.stdout


def test_cli_migrate_uses_environment_url(db_url: str) -> None:
    done = _cli("migrate", HELIX_DATABASE_URL=db_url)
    assert done.returncode == 0, done.stderr
    assert applied_migrations(db_url) == SHIPPED


def test_cli_migrate_defaults_to_embedded_server(tmp_path: Path) -> None:
    """A fresh embedded server of its own, so no state leaks into other runs on this machine."""
    pytest.importorskip("pgserver")
    data_dir = str(tmp_path / "pgdata")
    try:
        done = _cli("migrate", HELIX_DATA_DIR=data_dir)
        assert done.returncode == 0, done.stderr
        assert FIRST in done.stdout
        assert f"host={data_dir}" in done.stdout
        assert FIRST in applied_migrations(embedded_database_url(data_dir))
        again = _cli("migrate", HELIX_DATA_DIR=data_dir)
        assert "up to date" in again.stdout
    finally:
        subprocess.run(["pkill", "-f", "--", f"postgres -D {data_dir}"], check=False)


def test_cli_unreachable_database_is_a_one_line_error() -> None:
    done = _cli("migrate", "--database-url", "postgresql://postgres@127.0.0.1:1/x")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("helix-dbos migrate: error:")
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


def test_main_in_process(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["migrate", "--database-url", db_url]) == 0
    assert FIRST in capsys.readouterr().out
    assert main([]) == 2  # no subcommand: argparse usage error
    assert main(["migrate", "--database-url", "sqlite:///nope.db"]) == 2
    assert "Not a PostgreSQL URL" in capsys.readouterr().err
