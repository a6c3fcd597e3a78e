"""Shared fixtures: a real PostgreSQL, one launched HelixDBOS, a scripted LLM.

The database is a fresh one per test session on the server named by
HELIX_TEST_DATABASE_URL, or on the embedded PostgreSQL when it is unset.
Agents get unique names per test, so runs and mock scripts never collide.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from helix_dbos import Agent, HelixDBOS, MockLLM
from helix_dbos.store.database import libpq_url, resolve_database_url, with_database
from helix_dbos.store.embedded import stop_embedded

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def embedded_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """This session's own embedded PostgreSQL folder (no path shared with another session),
    and the server in it stopped at the end: the suite leaves no PostgreSQL running."""
    path = tmp_path_factory.mktemp("pgdata")
    yield path
    stop_embedded(path)


def _server_url(embedded: Path) -> str:
    explicit = os.environ.get("HELIX_TEST_DATABASE_URL") or os.environ.get("HELIX_DATABASE_URL")
    return explicit or resolve_database_url(None, data_dir=embedded)


@pytest.fixture(scope="session")
def database_url(embedded_dir: Path) -> Iterator[str]:
    """A fresh database for this test session; dropped afterwards."""
    server = _server_url(embedded_dir)
    name = f"helix_test_{uuid.uuid4().hex[:10]}"
    admin = libpq_url(with_database(server, "postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield with_database(server, name)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')


@pytest.fixture(scope="session")
def mock_llm() -> MockLLM:
    return MockLLM()


@pytest.fixture(scope="session")
def helix(database_url: str, mock_llm: MockLLM) -> Iterator[HelixDBOS]:
    instance = HelixDBOS(
        database_url=database_url,
        llm=mock_llm,
        executor_id=f"pytest-{uuid.uuid4().hex[:8]}",
        application_version="helix-test",
    )
    instance.launch()
    yield instance
    instance.shutdown()


_counter = itertools.count()


@pytest.fixture
def make_agent(helix: HelixDBOS, request: pytest.FixtureRequest) -> Callable[..., Agent]:
    """Define and register an agent with a name unique to this test."""

    def make(**kwargs: Any) -> Agent:
        base = request.node.name.replace("[", "_").replace("]", "")[:40]
        agent = Agent(f"{base}_{next(_counter)}", **kwargs)
        helix.register(agent)
        return agent

    return make
