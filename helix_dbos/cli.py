"""The `helix-dbos` command.

Each subcommand is one `add_<name>(subparsers)` function that declares its arguments and
sets `handler=` to a function `(args) -> exit code`; list it in SUBCOMMANDS to register it.
main() turns any exception from a handler into a one-line message and exit code 2, so
operators see "cannot connect to ..." rather than a traceback (set HELIX_DEBUG=1 for one).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

Handler = Callable[[argparse.Namespace], int]
Subparsers = Any  # argparse's _SubParsersAction is private; this is what add_* receives.

EXIT_ERROR = 2


def add_database_url_option(parser: argparse.ArgumentParser) -> None:
    """The shared --database-url option (default: $HELIX_DATABASE_URL, else embedded)."""
    parser.add_argument(
        "--database-url",
        metavar="URL",
        default=None,
        help="PostgreSQL URL (default: $HELIX_DATABASE_URL, else an embedded server "
        "in $HELIX_DATA_DIR or ./.helix/pgdata)",
    )


# --- migrate -------------------------------------------------------------------------


def add_migrate(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "migrate",
        help="create the database if needed and apply pending schema migrations",
        description="Create the database if needed and apply pending schema migrations.",
    )
    add_database_url_option(parser)
    parser.set_defaults(handler=run_migrate)


def run_migrate(args: argparse.Namespace) -> int:
    from .store.database import ensure_database_exists, redact_url, resolve_database_url
    from .store.migrations import apply_migrations

    url = resolve_database_url(args.database_url)
    created = ensure_database_exists(url)
    applied = apply_migrations(url)
    where = redact_url(url)
    if created:
        print(f"Created database for {where}")
    if applied:
        print(f"Applied {len(applied)} migration(s) to {where}:")
        for version in applied:
            print(f"  {version}")
    else:
        print(f"Database {where} is up to date.")
    return 0


# --- registration --------------------------------------------------------------------

SUBCOMMANDS: list[Callable[[Subparsers], None]] = [add_migrate]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="helix-dbos", description="Durable LLM agents on DBOS and PostgreSQL."
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add_subcommand in SUBCOMMANDS:
        add_subcommand(subparsers)
    return parser


def _one_line(exc: BaseException) -> str:
    message = " ".join(str(exc).split())
    return message or type(exc).__name__


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error argparse already printed
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    handler: Handler = args.handler
    try:
        return handler(args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if os.environ.get("HELIX_DEBUG"):
            raise
        print(f"helix-dbos {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    raise SystemExit(main())
