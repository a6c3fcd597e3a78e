"""What the commands share: their options, the database they talk to, the app they load."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import psycopg
import typer
from rich.text import Text

from helix_dbos.cli.ids import resolve
from helix_dbos.cli.output import article, spinner, stderr_console
from helix_dbos.errors import SessionNotFoundError
from helix_dbos.server import queries
from helix_dbos.store.database import (
    DATABASE_URL_ENV,
    connect,
    embedded_data_dir,
    redact_url,
    resolve_database_url,
)
from helix_dbos.store.embedded import embedded_pid

if TYPE_CHECKING:  # imported when an app is loaded: the read commands never need DBOS
    from helix_dbos.facade.helix import HelixDBOS

EXIT_ERROR = 2
TOKEN_ENV = "HELIX_SERVER_TOKEN"


class CLIError(Exception):
    """A usage problem main() reports as one line on stderr (exit 2)."""


def json_option(text: str | None, option: str) -> Any:
    """An option's JSON value (None when not given); bad JSON is a usage error."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CLIError(f"{option} is not valid JSON: {exc}") from exc


DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        metavar="URL",
        help="PostgreSQL URL (default: $HELIX_DATABASE_URL, else the embedded server in "
        "$HELIX_DATA_DIR or ./.helix/pgdata)",
        show_default=False,
    ),
]
Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
Quiet = Annotated[
    bool, typer.Option("--quiet", "-q", help="No progress lines on stderr.", show_default=False)
]
AppSpec = Annotated[
    str,
    typer.Option(
        "--app",
        metavar="MODULE:ATTR",
        help="Your HelixDBOS instance, or a function returning one: `myapp.agents:helix`, "
        "or a file: `examples/server.py:helix`.",
        show_default=False,
    ),
]
Session = Annotated[
    str,
    typer.Argument(
        metavar="SESSION", help="The session id, or a prefix of it.", show_default=False
    ),
]
Reason = Annotated[
    str | None, typer.Option("--reason", metavar="TEXT", help="Why (the model sees it).")
]


def resolve_url(database_url: str | None) -> str:
    """The database URL. Starting the embedded PostgreSQL takes a few seconds (a spinner
    says so), and the server outlives the command: the command says that once, with the
    command that stops it. An embedded server already running is simply used."""
    if database_url or os.environ.get(DATABASE_URL_ENV):
        return resolve_database_url(database_url)
    data_dir = embedded_data_dir()
    if embedded_pid(data_dir) is not None:
        return resolve_database_url(None)
    with spinner("starting the embedded PostgreSQL"):
        url = resolve_database_url(None)
    stderr_console().print(
        Text(
            f"helix-dbos: started the embedded PostgreSQL in {data_dir}; it keeps running "
            "after this command (`helix-dbos db stop` stops it)."
        ),
        soft_wrap=True,
    )
    return url


@contextmanager
def read_connection(database_url: str | None) -> Iterator[Any]:
    """A read-only psycopg connection; a database without the helix schema says so."""
    url = resolve_url(database_url)
    with connect(url, autocommit=True) as conn:
        try:
            yield conn
        except psycopg.errors.UndefinedTable as exc:
            raise CLIError(
                f"the helix schema is missing in {redact_url(url)}: run `helix-dbos migrate`"
            ) from exc


def require_session(conn: Any, session_id: str) -> str:
    """The full id of the session `session_id` names (itself, or a unique prefix of it)."""
    session_id = resolve(conn, "session", session_id)
    if not queries.fetch_sync(conn, queries.session_exists(session_id)):
        raise SessionNotFoundError(session_id)
    return session_id


def load_helix(spec: str) -> HelixDBOS:
    """Import `module:attr` (or `path/file.py:attr`): a HelixDBOS, or a factory returning one."""
    from helix_dbos.facade.helix import HelixDBOS  # noqa: PLC0415 - DBOS only when used

    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise CLIError(f"--app must look like module:attr or file.py:attr, not {spec!r}")
    if module_name.endswith(".py"):
        path = Path(module_name).resolve()
        if not path.exists():
            raise CLIError(f"--app file {module_name} does not exist")
        sys.path.insert(0, str(path.parent))
        module_spec = importlib.util.spec_from_file_location(path.stem, path)
        assert module_spec is not None and module_spec.loader is not None
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[path.stem] = module
        module_spec.loader.exec_module(module)
    else:
        sys.path.insert(0, os.getcwd())
        module = importlib.import_module(module_name)
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise CLIError(f"--app: {module_name} has no attribute {attr!r}")
        target = getattr(target, part)
    if not isinstance(target, HelixDBOS) and callable(target):
        target = target()
    if not isinstance(target, HelixDBOS):
        raise CLIError(
            f"--app {spec} is {article(type(target).__name__)}, not a HelixDBOS "
            "(or a function returning one)"
        )
    return target
