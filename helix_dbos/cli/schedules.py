"""schedules: list, create, pause, resume, delete, backfill and trigger scheduled agents,
and a schedule's firings, through a `DBOSClient` on DBOS's schedule table (no worker
needed: every launched worker picks a change up at its next scheduler poll)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Annotated, Any

import typer

from helix_dbos.api.schedules import ScheduleInfo
from helix_dbos.cli.common import CLIError, DatabaseUrl, Json, read_connection, resolve_url
from helix_dbos.cli.output import Column, plural, print_json, print_rows, print_table
from helix_dbos.definitions.schedule import ScheduleSpec, check_schedule
from helix_dbos.errors import InvalidInputError
from helix_dbos.store.database import libpq_url

if TYPE_CHECKING:  # DBOS loads when a schedule is read or changed, not for --help
    from helix_dbos.schedules.book import ScheduleBook

APP_NAME_ENV = "HELIX_APP_NAME"

schedules_app = typer.Typer(
    name="schedules",
    help="Scheduled agents: each firing of a cron schedule is one run.",
    no_args_is_help=True,
)

SCHEDULE_COLUMNS = [
    Column("name", "NAME", shrinks=True),
    Column("agent", "AGENT", shrinks=True),
    Column("cron", "CRON"),
    Column("status", "STATUS"),
    Column("session_id", "SESSION", is_id=True, drop=2),
    Column("next_fire_at", "NEXT", drop=1),
    Column("input", "INPUT", wraps=True, drop=3),
]
FIRING_COLUMNS = [
    Column("scheduled_at", "SCHEDULED"),
    Column("outcome", "OUTCOME"),
    Column("session_id", "SESSION", is_id=True),
    Column("run_id", "RUN", is_id=True, drop=1),
]

Name = Annotated[str, typer.Argument(metavar="NAME", help="The schedule's name.")]
AppName = Annotated[
    str | None,
    typer.Option(
        "--app-name",
        metavar="NAME",
        help="The DBOS application the schedules belong to (HelixDBOS(app_name=...); "
        f"default: ${APP_NAME_ENV}, else helix_dbos).",
        show_default=False,
    ),
]


@contextmanager
def _book(database_url: str | None, app_name: str | None) -> Iterator[ScheduleBook]:
    from dbos import DBOSClient  # noqa: PLC0415 - DBOS only when a command runs

    from helix_dbos.schedules.book import ScheduleBook  # noqa: PLC0415

    name = app_name or os.environ.get(APP_NAME_ENV) or "helix_dbos"
    url = resolve_url(database_url)
    client = DBOSClient(system_database_url=libpq_url(url), application_name=name)
    try:
        yield ScheduleBook(client, app_name=name)
    finally:
        client.destroy()


def _show(info: ScheduleInfo, json_output: bool, verb: str) -> int:
    if json_output:
        print_json(info.model_dump(mode="json"))
    else:
        nxt = f", next firing {info.next_fire_at.isoformat()}" if info.next_fire_at else ""
        print(f"{verb} schedule {info.name} ({info.agent}, {info.cron}): {info.status}{nxt}")
    return 0


def _when(value: str, flag: str) -> datetime:
    try:
        # Python 3.10's fromisoformat does not read a trailing Z (3.11 does).
        text = value.strip()
        parsed = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    except ValueError as exc:
        raise CLIError(
            f"{flag} must be an ISO 8601 time (2026-01-31T09:00:00Z), not {value!r}"
        ) from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def list_schedules(
    agent: Annotated[
        str | None, typer.Option("--agent", metavar="AGENT", help="Only this agent's.")
    ] = None,
    json_output: Json = False,
    app_name: AppName = None,
    database_url: DatabaseUrl = None,
) -> int:
    """List the schedules, by name."""
    with _book(database_url, app_name) as book:
        found = book.list_all(agent)
    if json_output:
        print_json([s.model_dump(mode="json") for s in found])
    elif not found:
        print("No schedules.")
    else:
        print_table([s.model_dump() for s in found], SCHEDULE_COLUMNS)
    return 0


def create(
    name: Name,
    agent: Annotated[str, typer.Option("--agent", metavar="AGENT", help="The agent to run.")],
    cron: Annotated[
        str,
        typer.Option(
            "--cron",
            metavar="CRON",
            help="Five fields (minute hour day month weekday), or six with seconds first.",
        ),
    ],
    input: Annotated[
        str | None, typer.Option("--input", metavar="TEXT", help="Each run's user message.")
    ] = None,
    session: Annotated[
        str | None,
        typer.Option(
            "--session",
            metavar="SESSION",
            help="Append every firing to this session (default: a session per firing).",
        ),
    ] = None,
    strategy: Annotated[
        str,
        typer.Option(
            "--strategy",
            metavar="STRATEGY",
            help="A firing while the session's run is live: enqueue, reject or steer.",
        ),
    ] = "enqueue",
    tz: Annotated[
        str | None,
        typer.Option("--timezone", metavar="ZONE", help="The cron's time zone (default UTC)."),
    ] = None,
    backfill: Annotated[
        bool,
        typer.Option(
            "--backfill", help="At a worker's start or a resume, fire the missed firings."
        ),
    ] = False,
    json_output: Json = False,
    app_name: AppName = None,
    database_url: DatabaseUrl = None,
) -> int:
    """Create a schedule, or replace the definition of the one of that name (its status
    stays). The agent is looked up by the workers at each firing."""
    try:
        check_schedule(name, cron, strategy, tz)
    except InvalidInputError as exc:
        raise CLIError(str(exc)) from exc
    spec = ScheduleSpec(
        name=name,
        agent=agent,
        input=input,
        session_id=session,
        multitask_strategy=strategy,  # checked above
    )
    with _book(database_url, app_name) as book:
        info = book.put(spec, cron, timezone=tz, automatic_backfill=backfill)
    return _show(info, json_output, "Created")


def pause(name: Name, json_output: Json = False, app_name: AppName = None,
          database_url: DatabaseUrl = None) -> int:  # fmt: skip
    """Stop a schedule's firings (from each worker's next scheduler poll)."""
    with _book(database_url, app_name) as book:
        return _show(book.pause(name), json_output, "Paused")


def resume(name: Name, json_output: Json = False, app_name: AppName = None,
           database_url: DatabaseUrl = None) -> int:  # fmt: skip
    """Fire a paused schedule again, from its next due time."""
    with _book(database_url, app_name) as book:
        return _show(book.resume(name), json_output, "Resumed")


def delete(name: Name, json_output: Json = False, app_name: AppName = None,
           database_url: DatabaseUrl = None) -> int:  # fmt: skip
    """Delete a schedule (its runs and firings stay)."""
    with _book(database_url, app_name) as book:
        return _show(book.delete(name), json_output, "Deleted")


def backfill_command(
    name: Name,
    start: Annotated[
        str, typer.Option("--start", metavar="TIME", help="Fire the firings due after this...")
    ],
    end: Annotated[
        str | None,
        typer.Option("--end", metavar="TIME", help="...and before this (default: now)."),
    ] = None,
    json_output: Json = False,
    app_name: AppName = None,
    database_url: DatabaseUrl = None,
) -> int:
    """Fire the missed firings of a window, once each (firings that ran are skipped, so
    running it twice fires nothing more)."""
    since = _when(start, "--start")
    until = _when(end, "--end") if end else datetime.now(timezone.utc)
    with _book(database_url, app_name) as book:
        ids = book.backfill(name, since, until)
    if json_output:
        print_json({"firing_ids": ids})
    else:
        print(f"Backfilled {plural(len(ids), 'firing')} of schedule {name}.")
        for firing_id in ids:
            print(f"  {firing_id}")
    return 0


def trigger(name: Name, json_output: Json = False, app_name: AppName = None,
            database_url: DatabaseUrl = None) -> int:  # fmt: skip
    """Fire a schedule now, besides its own firings."""
    with _book(database_url, app_name) as book:
        firing_id = book.trigger(name)
    if json_output:
        print_json({"firing_id": firing_id})
    else:
        print(f"Fired schedule {name}: {firing_id}")
    return 0


def firings(
    name: Name,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many.")] = 20,
    json_output: Json = False,
    database_url: DatabaseUrl = None,
) -> int:
    """A schedule's firings, newest first, with the session and run each made."""
    from helix_dbos.schedules.book import FIRINGS_SQL_PSYCOPG  # noqa: PLC0415 - SQLAlchemy's

    with read_connection(database_url) as conn:
        cursor = conn.execute(FIRINGS_SQL_PSYCOPG, {"name": name, "limit": limit})
        names = [d[0] for d in cursor.description]
        rows: list[dict[str, Any]] = [dict(zip(names, r, strict=True)) for r in cursor]
    empty = f"Schedule {name} has no firings."
    return print_rows(rows, FIRING_COLUMNS, json_output=json_output, empty=empty)


def register(app: typer.Typer) -> None:
    schedules_app.command("list")(list_schedules)
    schedules_app.command("create")(create)
    schedules_app.command("pause")(pause)
    schedules_app.command("resume")(resume)
    schedules_app.command("delete")(delete)
    schedules_app.command("backfill")(backfill_command)
    schedules_app.command("trigger")(trigger)
    schedules_app.command("firings")(firings)
    app.add_typer(schedules_app)
