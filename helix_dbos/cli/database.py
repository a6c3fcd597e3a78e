"""migrate, db-url and db stop: the database in the open."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from helix_dbos.cli.common import DatabaseUrl, Json, resolve_url
from helix_dbos.cli.output import plural, print_json
from helix_dbos.store.database import (
    DATABASE_URL_ENV,
    embedded_data_dir,
    libpq_url,
    redact_url,
)
from helix_dbos.store.embedded import embedded_pid, stop_embedded

db_app = typer.Typer(
    name="db",
    help="The embedded PostgreSQL of this folder.",
    no_args_is_help=True,
)


def migrate(json_output: Json = False, database_url: DatabaseUrl = None) -> int:
    """Create the database if needed, apply helix's pending migrations and bring DBOS's
    tables up to date (a deployment step before a fleet of workers starts)."""
    # Only this command needs DBOS: `HelixDBOS.migrate()`'s own steps.
    from helix_dbos.runtime.worker_process import migrate as migrate_all  # noqa: PLC0415

    url = resolve_url(database_url)
    done = migrate_all(url)
    created, applied = done.created, done.applied
    where = redact_url(url)
    if json_output:
        print_json({"database": where, "created": created, "applied": applied})
        return 0
    if created:
        print(f"Created database for {where}")
    if applied:
        print(f"Applied {plural(len(applied), 'migration')} to {where}:")
        for version in applied:
            print(f"  {version}")
    else:
        print(f"Database {where} is up to date.")
    return 0


def db_url(
    show_password: Annotated[
        bool, typer.Option("--show-password", help="Print the password instead of ***.")
    ] = False,
    json_output: Json = False,
    database_url: DatabaseUrl = None,
) -> int:
    """Print the URL of the database in use.

    That is --database-url, else $HELIX_DATABASE_URL, else the embedded PostgreSQL
    (started if needed). Point the DBOS CLI at it with
    `dbos workflow list -s "$(helix-dbos db-url --show-password)"`.
    """
    embedded = not (database_url or os.environ.get(DATABASE_URL_ENV))
    url = libpq_url(resolve_url(database_url))
    shown = url if show_password else redact_url(url)
    if json_output:
        print_json(
            {
                "url": shown,
                "embedded": embedded,
                "data_dir": str(embedded_data_dir()) if embedded else None,
            }
        )
    else:
        print(shown)
    return 0


@db_app.command("stop")
def db_stop(json_output: Json = False) -> int:
    """Stop the embedded PostgreSQL this folder started.

    The folder is $HELIX_DATA_DIR or ./.helix/pgdata; the next command that needs the
    database starts it again.
    """
    data_dir = embedded_data_dir()
    pid = stop_embedded(data_dir)
    if json_output:
        print_json({"data_dir": str(data_dir), "stopped_pid": pid})
    elif pid is None:
        print(f"No embedded PostgreSQL runs in {data_dir}.")
    else:
        print(f"Stopped the embedded PostgreSQL in {data_dir} (pid {pid}).")
    return 0


@db_app.command("status")
def db_status(json_output: Json = False) -> int:
    """Say whether the embedded PostgreSQL of this folder runs (without starting it)."""
    data_dir = embedded_data_dir()
    pid = embedded_pid(data_dir)
    if json_output:
        print_json({"data_dir": str(data_dir), "pid": pid, "running": pid is not None})
    elif pid is None:
        print(f"No embedded PostgreSQL runs in {data_dir}.")
    else:
        print(f"The embedded PostgreSQL in {data_dir} runs (pid {pid}).")
    return 0


def register(app: typer.Typer) -> None:
    app.command("migrate")(migrate)
    app.command("db-url")(db_url)
    app.add_typer(db_app)
