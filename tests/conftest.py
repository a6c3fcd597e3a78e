"""Shared fixtures: a real PostgreSQL, one launched HelixDBOS, a scripted LLM.

The database is a fresh one per test session on the server named by
HELIX_TEST_DATABASE_URL, or on the embedded PostgreSQL when it is unset; each `crash`
test (real processes, killed) gets a migrated database of its own.
Agents get unique names per test, so runs and mock scripts never collide.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest
from dbos import DBOS

from helix_dbos import Agent, HelixDBOS, MockLLM
from helix_dbos.definitions.queue import agent_queue
from helix_dbos.store.database import (
    database_name,
    libpq_url,
    resolve_database_url,
    with_database,
)
from helix_dbos.store.embedded import stop_embedded

REPO = Path(__file__).resolve().parent.parent


# Modules whose outcome depends on the PostgreSQL server itself (its SQL, its errors, its
# connections), beside the `crash` tests: CI runs these on the machine's server as well as on
# the embedded one; the rest of the suite runs once.
DATABASE_MODULES = frozenset(
    {
        "test_database",
        "test_driver",
        "test_final_write",
        "test_migrations",
        "test_run_integrity",
        "test_shutdown",
        "test_unpaired_calls",
        "test_unstorable_text",
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        module = getattr(item, "module", None)
        if module is not None and module.__name__.rsplit(".", 1)[-1] in DATABASE_MODULES:
            item.add_marker(pytest.mark.database)


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


@contextlib.contextmanager
def _new_database(embedded: Path, template: str | None = None) -> Iterator[str]:
    """A new database on the test server (empty, or a copy of `template`), dropped on exit."""
    server = _server_url(embedded)
    name = f"helix_test_{uuid.uuid4().hex[:10]}"
    admin = libpq_url(with_database(server, "postgres"))
    copy = f' TEMPLATE "{template}"' if template else ""
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"{copy}')
    yield with_database(server, name)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')


def _migrate(url: str) -> None:
    """The schemas a HelixDBOS makes before launch (helix's, DBOS's system tables, the
    checkpoint table of DBOS's datasource), made in a process of its own: DBOS refuses
    a datasource once this one has launched."""
    made = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, helix_dbos; helix_dbos.HelixDBOS(database_url=sys.argv[1]).migrate()",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr


@pytest.fixture(scope="session")
def session_database_url(embedded_dir: Path) -> Iterator[str]:
    """A fresh database for this test session; dropped afterwards."""
    with _new_database(embedded_dir) as url:
        yield url


@pytest.fixture(scope="session")
def migrated_template(embedded_dir: Path) -> Iterator[str]:
    """The name of a migrated database that crash tests' databases are copied from."""
    with _new_database(embedded_dir) as url:
        _migrate(url)
        yield database_name(url) or ""


@pytest.fixture
def database_url(request: pytest.FixtureRequest, embedded_dir: Path) -> Iterator[str]:
    """The session's database, or for a `crash` test a migrated one of its own.

    A crash test kills the processes it started, and a process killed after its caller
    had a run's result may not yet have marked the workflow done. A later test's live
    worker then claims that dead worker and hands the run back to a queue: into the
    later test's marker files, or listed among its runs waiting for a worker (CI saw
    both). A database per crash test keeps each test to the runs it started.
    """
    if request.node.get_closest_marker("crash") is None:
        yield request.getfixturevalue("session_database_url")
        return
    template = request.getfixturevalue("migrated_template")
    with _new_database(embedded_dir, template) as url:
        yield url


@pytest.fixture
def empty_database_url(embedded_dir: Path) -> Iterator[str]:
    """A database with no schema at all, as a fleet's first deployment finds it."""
    with _new_database(embedded_dir) as url:
        yield url


@pytest.fixture(scope="session")
def mock_llm() -> MockLLM:
    return MockLLM()


@pytest.fixture(scope="session")
def helix(session_database_url: str, mock_llm: MockLLM) -> Iterator[HelixDBOS]:
    instance = HelixDBOS(
        database_url=session_database_url,
        llm=mock_llm,
        executor_id=f"pytest-{uuid.uuid4().hex[:8]}",
        application_version="helix-test",
    )
    instance.launch()
    yield instance
    instance.shutdown()


_counter = itertools.count()


@pytest.fixture
def make_agent(helix: HelixDBOS, request: pytest.FixtureRequest) -> Iterator[Callable[..., Agent]]:
    """Define and register an agent with a name unique to this test.

    Afterwards the DBOS queues of the agents this test registered are deleted. DBOS polls
    each queue it listens to in a thread of its own, about once a second, and the
    session's one HelixDBOS serves every test's agents: with the hundreds a session
    registers, those polls took the process's CPU (a 64-step test took 125 s late in
    the session, 0.8 s alone)."""
    before = set(helix.agents)

    def make(**kwargs: Any) -> Agent:
        base = request.node.name.replace("[", "_").replace("]", "")[:40]
        agent = Agent(f"{base}_{next(_counter)}", **kwargs)
        helix.register(agent)
        return agent

    yield make
    queues = [agent_queue(name) for name in set(helix.agents) - before]
    with ThreadPoolExecutor(max_workers=1) as thread:  # DBOS refuses the sync call on a loop
        for queue in queues:
            thread.submit(DBOS.delete_queue, queue).result()
