"""URL handling, database creation and the embedded PostgreSQL (against a real server)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import uuid
from pathlib import Path

import forkserver
import pytest
import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.ext.asyncio import create_async_engine

from helix_dbos.store import database
from helix_dbos.store.database import (
    DatabaseConfigError,
    connect,
    database_name,
    embedded_data_dir,
    embedded_database_url,
    ensure_database_exists,
    libpq_url,
    redact_url,
    resolve_database_url,
    sqlalchemy_url,
    with_database,
)

REPO = Path(__file__).resolve().parent.parent
SOCKET_URL = "postgresql://postgres:@/postgres?host=/tmp/pgtest"


@pytest.fixture(scope="module")
def server_url(embedded_dir: Path) -> str:
    """A real server: $HELIX_TEST_DATABASE_URL, else this session's embedded server."""
    return os.environ.get("HELIX_TEST_DATABASE_URL") or embedded_database_url(embedded_dir)


@pytest.fixture
def scratch_db_url(server_url: str):
    """URL of a database name that does not exist yet; dropped afterwards if created."""
    name = f"helix_db_{uuid.uuid4().hex[:12]}"
    yield with_database(server_url, name)
    _drop_database(server_url, name)


def _drop_database(server_url: str, name: str) -> None:
    with connect(server_url, dbname="postgres", autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def _subprocess_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELIX_")}
    env.update(extra)
    return env


# --- URL forms -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "given",
    [
        "postgresql://u:p@h:5432/db",
        "postgres://u:p@h:5432/db",
        "postgresql+psycopg://u:p@h:5432/db",
        "postgresql+psycopg2://u:p@h:5432/db",
        "POSTGRESQL://u:p@h:5432/db",
    ],
)
def test_url_forms_convert_for_each_driver(given: str) -> None:
    assert sqlalchemy_url(given) == "postgresql+psycopg://u:p@h:5432/db"
    assert libpq_url(given) == "postgresql://u:p@h:5432/db"


def test_unix_socket_url_keeps_host_query_intact() -> None:
    assert sqlalchemy_url(SOCKET_URL) == "postgresql+psycopg://postgres:@/postgres?host=/tmp/pgtest"
    assert libpq_url(sqlalchemy_url(SOCKET_URL)) == SOCKET_URL
    assert database_name(SOCKET_URL) == "postgres"


def test_percent_encoded_password_is_not_reencoded() -> None:
    url = "postgresql://u:p%40ss%2Fw@h/db?sslmode=require"
    assert sqlalchemy_url(url) == "postgresql+psycopg://u:p%40ss%2Fw@h/db?sslmode=require"


@pytest.mark.parametrize(
    "bad", ["sqlite:///x.db", "mysql://u@h/db", "postgresql+asyncpg://u@h/db", "h:5432/db"]
)
def test_non_postgres_urls_are_refused(bad: str) -> None:
    with pytest.raises(DatabaseConfigError):
        sqlalchemy_url(bad)


def test_with_database_swaps_only_the_name() -> None:
    assert with_database(SOCKET_URL, "other") == "postgresql://postgres:@/other?host=/tmp/pgtest"
    assert with_database("postgresql://u:p@h:1/a", "b") == "postgresql://u:p@h:1/b"
    assert with_database("postgresql://u@h", "b") == "postgresql://u@h/b"


def test_redact_url_hides_password_only() -> None:
    assert redact_url("postgresql://u:secret@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert redact_url("postgresql://u@h/db") == "postgresql://u@h/db"


# --- resolution ----------------------------------------------------------------------


def test_explicit_url_beats_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HELIX_DATABASE_URL", "postgresql://env@h/env")
    assert resolve_database_url("postgresql://arg@h/arg") == "postgresql://arg@h/arg"
    assert resolve_database_url() == "postgresql://env@h/env"


def test_data_dir_argument_beats_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HELIX_DATA_DIR", str(tmp_path / "from-env"))
    assert embedded_data_dir() == tmp_path / "from-env"
    assert embedded_data_dir(tmp_path / "arg") == tmp_path / "arg"
    monkeypatch.delenv("HELIX_DATA_DIR")
    monkeypatch.chdir(tmp_path)
    assert embedded_data_dir() == tmp_path / ".helix" / "pgdata"


def test_missing_pgserver_gives_install_hint(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("HELIX_DATABASE_URL", raising=False)
    monkeypatch.setitem(sys.modules, "pgserver", None)  # makes `import pgserver` fail
    with pytest.raises(DatabaseConfigError, match=r"helix-dbos\[embedded\].*HELIX_DATABASE_URL"):
        resolve_database_url(data_dir=tmp_path / "pg")


def test_embedded_server_is_reused_within_a_process(embedded_dir: Path) -> None:
    first = embedded_database_url(embedded_dir)
    handle = database._EMBEDDED_SERVERS[embedded_dir.resolve()]
    assert embedded_database_url(embedded_dir) == first
    assert database._EMBEDDED_SERVERS[embedded_dir.resolve()] is handle
    with connect(first) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


_WRITER = """
import json, sys
from helix_dbos.store.database import connect, embedded_database_url
url = embedded_database_url(sys.argv[1])
with connect(url, autocommit=True) as conn:
    conn.execute("CREATE TABLE IF NOT EXISTS marker (token text)")
    if sys.argv[2] != "-":
        conn.execute("INSERT INTO marker VALUES (%s)", (sys.argv[2],))
    tokens = [r[0] for r in conn.execute("SELECT token FROM marker").fetchall()]
    started = conn.execute("SELECT pg_postmaster_start_time()::text").fetchone()[0]
print(json.dumps({"url": url, "tokens": tokens, "started": started}))
"""


def _run_writer(data_dir: Path, token: str) -> dict:
    done = forkserver.run(
        [sys.executable, "-c", _WRITER, str(data_dir), token],
        cwd=REPO,
        env=_subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _stop_postmaster(data_dir: Path) -> None:
    pid_file = data_dir / "postmaster.pid"
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text().splitlines()[0])
    try:
        os.kill(pid, signal.SIGINT)  # fast shutdown of the server this test started
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)


def test_embedded_server_survives_its_process_and_is_reused(tmp_path: Path) -> None:
    data_dir = tmp_path / "pgdata"
    token = uuid.uuid4().hex
    try:
        first = _run_writer(data_dir, token)
        # The first process has exited; its server must still be up and hold the data.
        second = _run_writer(data_dir, "-")
        assert second["tokens"] == [token]
        assert second["started"] == first["started"], "server was restarted, not reused"
        assert second["url"] == first["url"]
        assert f"host={data_dir}" in first["url"]
    finally:
        _stop_postmaster(data_dir)


def test_embedded_server_stopped_under_us_is_restarted(tmp_path: Path) -> None:
    data_dir = tmp_path / "pgdata"
    try:
        url = embedded_database_url(data_dir)
        _stop_postmaster(data_dir)
        assert embedded_database_url(data_dir) == url
        with connect(url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        _stop_postmaster(data_dir)
        database._EMBEDDED_SERVERS.pop(data_dir.resolve(), None)


# --- database creation and driver compatibility --------------------------------------


def test_ensure_database_exists_creates_once(scratch_db_url: str) -> None:
    assert ensure_database_exists(scratch_db_url) is True
    assert ensure_database_exists(scratch_db_url) is False
    with connect(scratch_db_url) as conn:
        row = conn.execute("SELECT current_database()").fetchone()
    assert row == (database_name(scratch_db_url),)


async def test_async_sqlalchemy_engine_accepts_converted_url(server_url: str) -> None:
    engine = create_async_engine(sqlalchemy_url(server_url))
    try:
        async with engine.connect() as conn:
            name = (await conn.execute(sa.text("SELECT current_database()"))).scalar_one()
    finally:
        await engine.dispose()
    assert name == database_name(server_url)


_DBOS_CHECK = """
import sys
from dbos import DBOS
DBOS(config={"name": "helix-url-check", "system_database_url": sys.argv[1],
              "application_version": "t"})

@DBOS.workflow()
def add_one(x: int) -> int:
    return x + 1

DBOS.launch()
try:
    print("RESULT", add_one(41))
finally:
    DBOS.destroy()
"""


@pytest.mark.parametrize("convert", [libpq_url, sqlalchemy_url], ids=["libpq", "sqlalchemy"])
def test_dbos_launches_on_the_url(scratch_db_url: str, convert) -> None:
    """DBOS 3.4 parses system_database_url with SQLAlchemy and forces the psycopg driver,
    so both forms work, unix-socket `?host=` included; it creates the database itself."""
    done = forkserver.run(
        [sys.executable, "-c", _DBOS_CHECK, convert(scratch_db_url)],
        cwd=REPO,
        env=_subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "RESULT 42" in done.stdout
    with connect(scratch_db_url) as conn:
        count = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'dbos'"
        ).fetchone()
    assert count is not None and count[0] > 0
