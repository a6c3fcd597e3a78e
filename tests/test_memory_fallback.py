"""Memory on a PostgreSQL server without pgvector (the machine's Debian server): the
migration applies, memories save and full-text search works, vector search raises an
error naming the missing extension, and `doctor` says so.

It runs on its own database on the server at HELIX_NO_VECTOR_DATABASE_URL (default: the
local server, 127.0.0.1:5432), which must lack pgvector; the embedded PostgreSQL has it."""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import forkserver
import psycopg
import pytest
from helpers import skip_or_fail_in_ci

from helix_dbos.store.database import libpq_url, with_database

pytestmark = pytest.mark.database
APP = Path(__file__).parent / "apps" / "memory_fallback_app.py"
SERVER = os.environ.get(
    "HELIX_NO_VECTOR_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)


@pytest.fixture
def no_vector_url() -> Iterator[str]:
    admin = libpq_url(with_database(SERVER, "postgres"))
    try:
        with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
            has = conn.execute(
                "SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'"
            ).fetchone()
            if has and has[0]:
                pytest.skip(f"the server at {SERVER} has pgvector: this test needs one without")
            name = f"helix_memory_{uuid.uuid4().hex[:10]}"
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        skip_or_fail_in_ci(f"no PostgreSQL server without pgvector at {SERVER}: {exc}")
    yield with_database(SERVER, name)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
            (name,),
        )
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')


def test_without_pgvector_memories_save_and_text_search_works(no_vector_url):
    done = forkserver.run(
        [sys.executable, str(APP), no_vector_url], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["available"] is False
    assert found["status"] == "pending", "kept for process_unembedded() once pgvector is there"
    assert found["text"] and found["hybrid"], "full text answers, hybrid falls back to it"
    for key in ("vector_error", "process_error"):
        assert "PostgreSQL extension 'vector' (pgvector)" in found[key]
        assert "apt install postgresql-<version>-pgvector" in found[key]
    with psycopg.connect(libpq_url(no_vector_url)) as conn:
        migrated = conn.execute(
            "SELECT count(*) FROM helix.schema_migrations WHERE version = '0014_memories'"
        ).fetchone()
        columns = conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = 'helix' "
            "AND table_name = 'memories' AND column_name IN ('embedding', 'search')"
        ).fetchall()
    assert migrated == (1,)
    assert columns == [("search",)], "no embedding column without the extension"

    doctor = forkserver.run(
        [
            sys.executable,
            "-m",
            "helix_dbos.cli",
            "doctor",
            "--json",
            "--database-url",
            no_vector_url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    [check] = [c for c in json.loads(doctor.stdout) if c["name"] == "vector search"]
    assert check["level"] == "warn"
    assert "no pgvector extension 'vector'" in check["found"] and "pgvector" in check["fix"]
