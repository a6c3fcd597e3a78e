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
import re
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import forkserver
import psycopg
import pytest
from dbos import DBOS
from helpers import skip_or_fail_in_ci

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

# CPU seconds per module when HELIX_TEST_CPU_REPORT names a file (tests/cpu_report.py).
pytest_plugins = ["cpu_report"]

# pytest-xdist's workers start with COLUMNS=80 in their environment, which a serial run does
# not have: the CLI subprocesses the tests start would inherit it and cut their reports to 80
# columns instead of the 100 they print to a pipe.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.pop("COLUMNS", None)


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


# What CI runs on Python 3.10 (`-m "py310 and not crash"`, see `.ci/run`): the import of every
# module, and one end to end path through each dependency whose version can resolve
# differently there (DBOS on 3.10's asyncio, the HTTP stack, typer and rich, genai-prices,
# the MCP client, pgvector's adapter, DBOS's scheduler, OpenTelemetry). Crash tests stay on
# 3.11, as before: some need 3.11 (tests/release_code.py reads tomllib).
PY310_MODULES = frozenset(
    {
        "test_every_module_imports",
        "test_public_api",
        "test_readme",
        "test_orchestration",
        "test_hitl",
        "test_streaming",
        "test_subagents",
        "test_server",
        "test_client",
        "test_cli",
        "test_costs",
        "test_mcp",
        "test_memory",
        "test_schedules",
        "test_otel",
    }
)

# The modules that took longest (from `--durations=0`, slowest first), started first under
# pytest-xdist: `--dist loadfile` hands out whole modules in collection order, and one long
# module handed out last would run alone at the end. Only the order changes; a module left
# out of this list runs in its usual place.
SLOW_MODULES = (
    # long and mostly waiting (leases, restarts) beside long and busy ones, so that the
    # two cores stay busy at the start; then the rest by time, longest first
    "test_workers",
    "test_context_compaction",
    "test_remote_subagents",
    "test_ai_sdk",
    "test_ag_ui",
    "test_pooler",
    "test_a2a",
    "test_upgrade_from_older",
    "test_db_outage",
    "test_inbox_browser",
    "test_limits",
    "test_wait_parking",
    "test_schedules_fleet",
    "test_inbox_security_browser",
    "test_crash",
    "test_mcp",
    "test_fencing",
    "test_schedules",
    "test_server_security",
    "test_mcp_server",
    "test_chaos_soak",
    "test_wait_resume",
    "test_release_upgrade",
    "test_memory_crash",
    "test_cli_setup",
    "test_call_ids",
    "test_subagents",
    "test_limits_http",
    "test_database",
    "test_readme",
    "test_migrations",
    "test_connections",
    "test_client",
    "test_architecture",
    "test_cli",
    "test_log_events",
    "test_time_travel",
    "test_http_robustness",
    "test_schedules_cli",
    "test_subagent_crash",
)


def _module_name(item: pytest.Item) -> str:
    module = getattr(item, "module", None)
    return "" if module is None else str(module.__name__).rsplit(".", 1)[-1]


def _ensure_pgserver_user() -> None:
    """Run as root, the embedded PostgreSQL runs as the system user `pgserver`, which
    pgserver adds with `useradd` on first use. Each xdist worker would add it at once on a
    machine that lacks it: all but one `useradd` failed ("already exists") and every test
    of those workers errored. The controller adds it once, before the workers start."""
    if os.environ.get("PYTEST_XDIST_WORKER") or os.environ.get("HELIX_TEST_DATABASE_URL"):
        return
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return
    import pwd  # noqa: PLC0415 - POSIX only, like the check above

    try:
        pwd.getpwnam("pgserver")
    except KeyError:
        # Another session may add it meanwhile (fine), or useradd may be missing: then
        # pgserver tries itself, in the first worker that needs it, and says why it failed.
        with contextlib.suppress(OSError):
            subprocess.run(["useradd", "-s", "/bin/bash", "pgserver"], capture_output=True)


def _compile_bytecode() -> None:
    """Write the bytecode of the package, the tests and the examples once, before the
    workers start. Where PYTHONDONTWRITEBYTECODE is set (this machine and its CI set it),
    no process writes any: each of the suite's ~400 Python subprocesses (the crash apps,
    the CLI, the servers) compiled the package's ~170 modules from source again, about
    0.2 s of CPU each. Reading bytecode is not affected by the variable."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    import compileall  # noqa: PLC0415 - once, in the controller

    skip = re.compile(r"node_modules")
    for folder in ("helix_dbos", "tests", "examples"):
        compileall.compile_dir(REPO / folder, quiet=1, rx=skip)


def _rewrite_asserts_once(config: pytest.Config) -> None:
    """Write pytest's rewritten test modules once, before the workers start. pytest rewrites
    the asserts of each test module as it imports it and keeps the result beside the
    bytecode, but not where PYTHONDONTWRITEBYTECODE is set: every xdist worker rewrote the
    suite's ~150 modules again, 6 s of CPU each at startup. pytest reads the cache whatever
    the variable says, and checks it against each source's hash. The controller splits the
    work with one forked child, one half each. It calls pytest's own rewrite functions,
    which are private: if they change, this writes nothing and the workers rewrite as
    before."""
    if os.environ.get("PYTEST_XDIST_WORKER") or not sys.dont_write_bytecode:
        return
    try:
        from _pytest.assertion import rewrite  # noqa: PLC0415 - once, in the controller

        state = config.stash[rewrite.assertstate_key]
        read_pyc, rewrite_test, write_pyc = (
            rewrite._read_pyc,
            rewrite._rewrite_test,
            rewrite._write_pyc,
        )
        cache_dir, tail = rewrite.get_cache_dir, rewrite.PYC_TAIL
    except (ImportError, AttributeError, KeyError):
        return
    tests = REPO / "tests"
    sources = sorted(
        {*tests.rglob("test_*.py"), *tests.rglob("conftest.py")}
        | {tests / "cpu_report.py", tests / "double_texting_support.py"}
    )
    sources = [s for s in sources if "node_modules" not in s.parts]

    def write(part: list[Path]) -> None:
        for source in part:
            pyc = cache_dir(source) / (source.name[:-3] + tail)
            if read_pyc(source, pyc, state.trace) is not None:
                continue  # written by an earlier run, and its source has not changed
            with contextlib.suppress(Exception):  # a file pytest can't rewrite fails later, in it
                pyc.parent.mkdir(exist_ok=True)
                source_hash, code = rewrite_test(source, config)
                write_pyc(state, code, source_hash, pyc)

    child = os.fork()
    if child == 0:
        try:
            write(sources[1::2])
        finally:
            os._exit(0)
    write(sources[::2])
    os.waitpid(child, 0)


def pytest_configure(config: pytest.Config) -> None:
    _ensure_pgserver_user()
    _compile_bytecode()
    _rewrite_asserts_once(config)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        name = _module_name(item)
        if name in DATABASE_MODULES:
            item.add_marker(pytest.mark.database)
        if name in PY310_MODULES:
            item.add_marker(pytest.mark.py310)
    if os.environ.get("PYTEST_XDIST_WORKER"):  # every worker sorts alike: the same collection
        rank = {name: i for i, name in enumerate(SLOW_MODULES)}
        items.sort(key=lambda item: rank.get(_module_name(item), len(rank)))  # stable


@pytest.fixture(scope="session")
def embedded_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """This session's own embedded PostgreSQL folder (no path shared with another session),
    and the server in it stopped at the end: the suite leaves no PostgreSQL running."""
    path = tmp_path_factory.mktemp("pgdata")
    yield path
    stop_embedded(path)


_unsynced: set[str] = set()


def _server_url(embedded: Path) -> str:
    explicit = os.environ.get("HELIX_TEST_DATABASE_URL") or os.environ.get("HELIX_DATABASE_URL")
    if explicit:
        return explicit
    url = resolve_database_url(None, data_dir=embedded)
    if url not in _unsynced:
        _without_fsync(url)
        _unsynced.add(url)
    return url


def _without_fsync(url: str) -> None:
    """This session's embedded server does not flush its WAL to the disk at each commit.

    It is thrown away with the session: it must survive the kills and restarts the tests
    make, which PostgreSQL survives without fsync (what it wrote is in the kernel's page
    cache), not a power cut. With fsync each commit waited for the disk: a run commits
    several times, and the suite's thousands of runs waited minutes in all.
    """
    with psycopg.connect(libpq_url(with_database(url, "postgres")), autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET fsync = off")
        conn.execute("SELECT pg_reload_conf()")


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
    made = forkserver.run(
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


CHROMIUM = os.environ.get("HELIX_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="session")
async def _chromium() -> AsyncIterator[Any]:
    """One headless Chromium (Debian's, driven by Playwright) per pytest worker: each
    launch cost about 2 s of CPU (Playwright's Node.js driver and the browser's
    processes), paid by some 30 tests. Each test gets a context of its own
    (`browser_page`), so no cookie, storage or cache crosses from one test to the next."""
    try:
        from playwright.async_api import (  # noqa: PLC0415 - optional: skip without it
            async_playwright,
            expect,
        )
    except ImportError:
        skip_or_fail_in_ci("playwright is not installed: pip install playwright")
    # Expectations poll until true: 5 s (Playwright's default) is short for ReDoc or the
    # inbox rendering on a loaded 2-core machine; a page that never renders still fails.
    expect.set_options(timeout=30_000)
    if not os.path.exists(CHROMIUM):
        skip_or_fail_in_ci(f"Chromium is not installed at {CHROMIUM}: apt-get install -y chromium")
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        await browser.close()


@pytest.fixture
async def browser_page(_chromium: Any) -> AsyncIterator[tuple[Any, list[str]]]:
    """A page of headless Chromium in a browser context of its own, and the page errors
    it logged; skipped where Playwright or Chromium is missing, failed in CI."""
    context = await _chromium.new_context()
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page, errors
    await context.close()


@pytest.fixture
def wire_provider() -> Iterator[dict[str, Any]]:
    """`openai-wire:` and `anthropic-wire:` providers over recording transports (the
    provider tests in tests/llm/): a test puts a `wire.Recorder` under "openai" or
    "anthropic" before its run calls the model. Here, not in a tests/llm/conftest.py: a
    second `conftest` module would shadow this one for `from conftest import ...`."""
    import httpx  # noqa: PLC0415 - the SDKs load only for the tests that use them
    import httpx2  # noqa: PLC0415

    from helix_dbos.llm.anthropic import AnthropicAdapter  # noqa: PLC0415
    from helix_dbos.llm.openai import OpenAIAdapter  # noqa: PLC0415
    from helix_dbos.llm.providers import register_provider, unregister_provider  # noqa: PLC0415

    state: dict[str, Any] = {}

    def openai_factory(model: str, **_: Any) -> OpenAIAdapter:
        client = httpx.AsyncClient(transport=httpx.MockTransport(state["openai"].handle))
        return OpenAIAdapter(model, api_key="sk-test", http_client=client)

    def anthropic_factory(model: str, **_: Any) -> AnthropicAdapter:
        client = httpx2.AsyncClient(transport=httpx2.MockTransport(state["anthropic"].handle))
        return AnthropicAdapter(model, api_key="sk-ant-test", http_client=client)

    register_provider("openai-wire", openai_factory)
    register_provider("anthropic-wire", anthropic_factory)
    yield state
    unregister_provider("openai-wire")
    unregister_provider("anthropic-wire")
