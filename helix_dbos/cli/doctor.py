"""doctor: check what a first run needs, and say what to fix.

Each check is a small function returning a `Check` (ok, warn or fail, what was found,
the fix). Nothing is changed: the embedded PostgreSQL is started only when no URL is set
(as any command would), and migrations are counted, not applied.
"""

from __future__ import annotations

import importlib.metadata
import os
import socket
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Annotated, Literal

import typer
from rich.table import Table
from rich.text import Text

from helix_dbos.cli.common import DatabaseUrl, Json, load_helix, resolve_url
from helix_dbos.cli.output import plural, print_json, print_renderable
from helix_dbos.runtime.dbos import worker_workflows
from helix_dbos.store.database import (
    DATABASE_URL_ENV,
    connect,
    embedded_data_dir,
    redact_secrets,
    redact_url,
)
from helix_dbos.store.features import run_versions
from helix_dbos.store.migrations import applied_migrations, load_migrations
from helix_dbos.store.pooler import behind_proxy, detect_pgbouncer, pooler_settings

Level = Literal["ok", "warn", "fail"]
MIN_PYTHON = (3, 10)  # pyproject's requires-python
PROVIDER_KEYS = {"ANTHROPIC_API_KEY": "anthropic", "OPENAI_API_KEY": "openai"}


@dataclass(frozen=True)
class Check:
    name: str
    level: Level
    found: str
    fix: str = ""


def check_python() -> Check:
    version = ".".join(map(str, sys.version_info[:3]))
    if sys.version_info[:2] < MIN_PYTHON:
        return Check("python", "fail", version, "use Python 3.10 or newer")
    return Check("python", "ok", f"{version} ({sys.executable})")


def check_dbos() -> Check:
    try:
        version = importlib.metadata.version("dbos")
    except importlib.metadata.PackageNotFoundError:
        return Check("dbos", "fail", "not installed", "pip install 'dbos>=3.4,<3.5'")
    major_minor = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    if not (3, 4) <= major_minor < (3, 5):  # pyproject's pin: the versions read
        return Check("dbos", "fail", version, "pip install 'dbos>=3.4,<3.5'")
    return Check("dbos", "ok", f"DBOS Transact {version}")


def check_database(url: str) -> Check:
    where = redact_url(url)
    if not os.environ.get(DATABASE_URL_ENV) and "host=" in url:
        where = f"embedded PostgreSQL in {embedded_data_dir()}"
    try:
        with connect(url, connect_timeout=5) as conn:
            row = conn.execute("SHOW server_version").fetchone()
    except Exception as exc:
        return Check(
            "database",
            "fail",
            f"{where}: {redact_secrets(' '.join(str(exc).split()), url)}",
            f"start that server, fix {DATABASE_URL_ENV}, or unset it to use the embedded one",
        )
    return Check("database", "ok", f"PostgreSQL {row[0] if row else '?'} at {where}")


def check_migrations(url: str) -> Check:
    available = [m.version for m in load_migrations()]
    try:
        applied = set(applied_migrations(url))
    except Exception as exc:
        return Check(
            "migrations",
            "fail",
            f"cannot read them: {redact_secrets(str(exc), url)}",
            "fix the database first",
        )
    pending = [v for v in available if v not in applied]
    if pending:
        return Check(
            "migrations",
            "warn",
            f"{len(pending)} of {len(available)} pending ({', '.join(pending)})",
            "run `helix-dbos migrate` (HelixDBOS applies them on start too)",
        )
    return Check("migrations", "ok", f"all {len(available)} applied")


def check_vector_search(url: str) -> Check:
    """Memory's vector search (issue 36) needs pgvector; without it memories still save
    and full-text search works."""
    try:
        with connect(url, connect_timeout=5) as conn:
            row = conn.execute(
                "SELECT (SELECT extversion FROM pg_extension WHERE extname = 'vector'), "
                "EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector'), "
                "EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = 'helix' "
                "AND table_name = 'memories' AND column_name = 'embedding')"
            ).fetchone()
    except Exception as exc:
        return Check("vector search", "warn", redact_secrets(str(exc), url), "fix the database")
    version, installable, column = row if row else (None, False, False)
    if version and column:
        return Check("vector search", "ok", f"pgvector {version}: memory vector search on")
    if version or installable:
        return Check(
            "vector search",
            "warn",
            "pgvector is on the server but not set up in this database",
            "start helix once (it runs CREATE EXTENSION vector; the role needs the right "
            "to create it)",
        )
    return Check(
        "vector search",
        "warn",
        "the server has no pgvector extension 'vector': memories save and full-text "
        "search works, search(mode='vector') fails",
        "install pgvector (Debian/Ubuntu: apt install postgresql-<version>-pgvector; "
        "https://github.com/pgvector/pgvector#installation), then restart helix",
    )


def check_provider_keys() -> Check:
    present = [name for name in PROVIDER_KEYS if os.environ.get(name)]
    if present:
        return Check("provider keys", "ok", ", ".join(present) + " set")
    return Check(
        "provider keys",
        "warn",
        "neither ANTHROPIC_API_KEY nor OPENAI_API_KEY is set",
        "export one to run anthropic:* or openai:* models (the demo and MockLLM need none)",
    )


def check_worker_identity(url: str) -> Check:
    from helix_dbos.runtime.worker_process import DEFAULT_APP_VERSION  # noqa: PLC0415 - loads DBOS

    version = os.environ.get("HELIX_APP_VERSION", DEFAULT_APP_VERSION)
    executor = os.environ.get("HELIX_EXECUTOR_ID")
    identity = (
        f"executor id {executor or f'{socket.gethostname()}-<pid>-<random>'}, version {version}"
    )
    try:
        with connect(url, autocommit=True) as conn:
            live = [
                w
                for w in worker_workflows.list_workers(conn)
                if w.state == "live" and not w.expired
            ]
    except Exception:
        return Check("worker identity", "ok", identity + " (no worker table yet)")
    holder = next((w for w in live if w.executor_id == executor), None)
    if holder is not None:
        return Check(
            "worker identity",
            "fail",
            f"{identity}: in use by a live worker (host {holder.host}, pid {holder.pid})",
            "unset HELIX_EXECUTOR_ID (ids are unique per process) or stop that worker",
        )
    others = sorted({w.application_version for w in live} - {version})
    if others:
        return Check(
            "worker identity",
            "warn",
            f"{identity}; live workers run version {', '.join(others)}",
            "workers recover only workers of their own version: set HELIX_APP_VERSION alike",
        )
    return Check("worker identity", "ok", f"{identity}; {plural(len(live), 'live worker')}")


def check_held_runs(url: str) -> Check:
    """Runs that nothing will resume: held by a dead, stopped or expired worker while no
    live worker serves their agent (a live one would take them over by itself)."""
    try:
        with connect(url, autocommit=True) as conn:
            held = worker_workflows.runs_held_by_dead_workers(conn)
    except Exception:
        return Check("held runs", "ok", "none (no worker table yet)")
    if not held:
        return Check("held runs", "ok", "no unfinished run waits on a dead worker")
    workers = sorted({h.executor_id for h in held})
    agents = sorted({h.agent_name for h in held})
    return Check(
        "held runs",
        "warn",
        f"{plural(len(held), 'unfinished run')} held by {plural(len(workers), 'worker')} that "
        f"no longer run ({', '.join(f'{h.executor_id} ({h.worker_state})' for h in held[:3])}"
        f"{', …' if len(held) > 3 else ''}), and no live worker serves {', '.join(agents)}",
        "start a worker for those agents: `helix-dbos worker --app MODULE:ATTR` (it takes "
        f"them over at once), or hand them back to the queues: `helix-dbos recover {workers[0]}`",
    )


def check_run_versions(url: str) -> Check:
    """Live runs started by an application version that no live worker runs: DBOS resumes
    a workflow only in a process of its version, so nothing ever takes them up, and an
    answer to one is refused (`RunOnOtherVersionError`)."""
    try:
        with connect(url, autocommit=True) as conn:
            stranded = run_versions.stranded_runs(conn)
    except Exception as exc:
        return Check(
            "run versions",
            "warn",
            f"cannot read them: {redact_secrets(' '.join(str(exc).split()), url)}",
            "run `helix-dbos migrate`",
        )
    if not stranded:
        return Check("run versions", "ok", "every live run's application version has a worker")
    by_version: dict[str, list[str]] = {}
    for run in stranded:
        by_version.setdefault(run.version, []).append(run.run_id)
    found = "; ".join(
        f"{plural(len(ids), 'live run')} of version {version} ({', '.join(ids[:3])}"
        f"{', …' if len(ids) > 3 else ''})"
        for version, ids in by_version.items()
    )
    version = next(iter(by_version))
    return Check(
        "run versions",
        "warn",
        f"{found}: no live worker runs {'it' if len(by_version) == 1 else 'them'}, so "
        "nothing resumes these runs and answers to them are refused",
        f"finish them with a worker of that version, from the release that started them: "
        f"`HELIX_APP_VERSION={version} helix-dbos worker --app MODULE:ATTR` (docs/upgrading.md), "
        f"or abort them: `helix-dbos abort --version {version}`; list them with "
        f"`helix-dbos runs --version {version}`",
    )


def check_pooler(url: str) -> Check:
    """Whether the URL reaches a pooler, and whether helix is set up for one
    (HELIX_DB_POOLER, HELIX_LISTEN_DATABASE_URL: docs/poolers.md)."""
    try:
        settings = pooler_settings()
    except ValueError as exc:
        return Check("pooler", "fail", str(exc), "set HELIX_DB_POOLER=transaction or unset it")
    try:
        with connect(url, connect_timeout=5) as conn:
            proxied = behind_proxy(conn, url)
    except Exception as exc:
        return Check("pooler", "warn", redact_secrets(str(exc), url), "fix the database first")
    bouncer = detect_pgbouncer(url) if proxied or settings.pooled else None
    if settings.pooled:
        fix = "" if settings.listen_url else "set HELIX_LISTEN_DATABASE_URL for LISTEN"
        level: Level = "ok" if settings.listen_url else "warn"
        seen = f" ({bouncer} answers)" if bouncer else ""
        return Check("pooler", level, f"helix runs {settings.describe()}{seen}", fix)
    if bouncer is not None:
        return Check(
            "pooler",
            "fail",
            f"the URL reaches {bouncer}, and helix is not set up for a pooler",
            "set HELIX_DB_POOLER=transaction (and HELIX_LISTEN_DATABASE_URL), see docs/poolers.md",
        )
    if proxied:
        return Check(
            "pooler",
            "warn",
            "the server answers on another port than the URL's: a proxy or a pooler?",
            "behind a transaction pooler set HELIX_DB_POOLER=transaction (docs/poolers.md)",
        )
    return Check("pooler", "ok", "direct connections (no pooler seen)")


def check_app(spec: str) -> Check:
    try:
        helix = load_helix(spec)
    except Exception as exc:
        return Check("app", "fail", f"{spec}: {exc}", "fix --app (module:attr or file.py:attr)")
    problems = [p for p in map(helix.runtime.configuration_problem, helix.agents.values()) if p]
    if problems:
        return Check("app", "fail", "; ".join(problems), "set the key, or fix the model name")
    return Check(
        "app", "ok", f"{plural(len(helix.agents), 'agent')}: {', '.join(sorted(helix.agents))}"
    )


def run_checks(database_url: str | None, app: str | None) -> list[Check]:
    checks = [check_python(), check_dbos()]
    try:
        url = resolve_url(database_url)
    except Exception as exc:
        checks.append(
            Check("database", "fail", str(exc), "set HELIX_DATABASE_URL or install pgserver")
        )
        return [*checks, check_provider_keys()]
    database = check_database(url)
    checks.append(database)
    later: list[Callable[[], Check]] = [check_provider_keys]
    if database.level == "ok":
        later = [
            lambda: check_migrations(url),
            lambda: check_vector_search(url),  # memory (issue 36)
            lambda: check_pooler(url),  # poolers (issue 51)
            check_provider_keys,
            lambda: check_worker_identity(url),
            lambda: check_held_runs(url),
            lambda: check_run_versions(url),  # upgrades (issue 45)
        ]
    if app and database.level == "ok":
        later.append(lambda: check_app(app))
    return checks + [check() for check in later]


STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red"}


def doctor(
    app: Annotated[
        str | None,
        typer.Option("--app", metavar="MODULE:ATTR", help="Also check these agents' models."),
    ] = None,
    json_output: Json = False,
    database_url: DatabaseUrl = None,
) -> int:
    """Check what helix needs and say what to fix.

    Python, DBOS, the database, migrations, provider keys and the worker identity (and
    with --app, every agent's model). Exit code 1 when a check fails.
    """
    checks = run_checks(database_url, app)
    if json_output:
        print_json([asdict(c) for c in checks])
    else:
        table = Table(box=None, show_edge=False, pad_edge=False, show_header=False)
        table.add_column("check", no_wrap=True)
        table.add_column("level", no_wrap=True)
        table.add_column("found", overflow="fold")
        for c in checks:
            found = Text(c.found) + (Text(f"\n  fix: {c.fix}", style="dim") if c.fix else Text())
            table.add_row(Text(c.name), Text(c.level, style=STYLE[c.level]), found)
        print_renderable(table)
    return 1 if any(c.level == "fail" for c in checks) else 0


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
