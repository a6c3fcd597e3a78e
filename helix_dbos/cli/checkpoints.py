"""checkpoints, fork, prune (issue 30), and the checkpoint view of `transcript --at`.

They never launch DBOS: the same `TimeTravel` the executor uses runs on a plain
connection, and `prune` deletes DBOS's workflow records with a `DBOSClient`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import psycopg
import typer

from helix_dbos.cli.common import CLIError, DatabaseUrl, Json, Session, json_option, resolve_url
from helix_dbos.cli.ids import resolve
from helix_dbos.cli.output import Column, print_json, print_table
from helix_dbos.store.database import connect, libpq_url

if TYPE_CHECKING:  # SQLAlchemy and DBOS load when a command runs, not for --help
    from helix_dbos.runtime.control.time_travel import TimeTravel
    from helix_dbos.store.driver import DriverConnection

T = TypeVar("T")

At = Annotated[
    str,
    typer.Option(
        "--at",
        metavar="CHECKPOINT",
        help="A checkpoint id (see `helix-dbos checkpoints SESSION`).",
        show_default=False,
    ),
]

CHECKPOINT_COLUMNS = [
    Column("checkpoint_id", "CHECKPOINT", is_id=False),
    Column("kind", "KIND"),
    Column("step", "STEP"),
    Column("message_seq", "MSGS"),
    Column("llm_calls", "LLM CALLS"),
    Column("tokens", "TOKENS"),
    Column("created_at", "CREATED", drop=1),
    Column("state", "STATE", wraps=True, drop=2),
]


def _run(url: str, body: Callable[[TimeTravel], Coroutine[Any, Any, T]]) -> T:
    """`body` on a `TimeTravel` over one autocommit connection to `url`."""
    from helix_dbos.memory import store as memory_store  # noqa: PLC0415
    from helix_dbos.runtime.control.time_travel import TimeTravel  # noqa: PLC0415
    from helix_dbos.store.driver import DriverConnection  # noqa: PLC0415

    @asynccontextmanager
    async def connection() -> AsyncIterator[DriverConnection]:
        async with await psycopg.AsyncConnection.connect(libpq_url(url), autocommit=True) as raw:
            yield DriverConnection(raw)

    async def delete_workflows(ids: list[str]) -> None:
        from dbos import DBOSClient  # noqa: PLC0415 - DBOS loads only for a prune

        client = DBOSClient(system_database_url=url)
        try:
            await asyncio.to_thread(client.delete_workflows, ids)
        finally:
            client.destroy()

    travel = TimeTravel(connection, delete_workflows, {}, memory_store.prune_expired_batch)
    return asyncio.run(body(travel))


def _session(url: str, session: str) -> str:
    with connect(url, autocommit=True) as conn:
        return resolve(conn, "session", session)


def checkpoints(
    session: Session, json_output: Json = False, database_url: DatabaseUrl = None
) -> int:
    """List a session's checkpoints, oldest first (one per committed step)."""
    url = resolve_url(database_url)
    session = _session(url, session)
    found = _run(url, lambda tt: tt.get_checkpoints(session))
    if json_output:
        print_json([c.model_dump(mode="json") for c in found])
    elif not found:
        print("No checkpoints (a session from before checkpoints were recorded has none).")
    else:
        rows = [
            {
                **c.model_dump(),
                "llm_calls": c.usage.llm_calls,
                "tokens": c.usage.input_tokens + c.usage.output_tokens,
                "state": json.dumps(c.state, default=str),
            }
            for c in found
        ]
        print_table(rows, CHECKPOINT_COLUMNS)
    return 0


def transcript_at(
    session: str, checkpoint_id: str, database_url: str | None
) -> list[dict[str, Any]]:
    """The transcript rows (as `transcript` prints them) a checkpoint covers."""
    url = resolve_url(database_url)
    session = _session(url, session)
    view = _run(url, lambda tt: tt.get_checkpoint(session, checkpoint_id))
    return [
        {
            "seq": seq,
            "run_id": None,
            **m.model_dump(mode="json", include={"role", "content", "tool_call_id", "tool_name"}),
            "tool_calls": [c.model_dump(mode="json") for c in m.tool_calls or []],
            "is_error": m.is_error,
        }
        for seq, m in enumerate(view.messages, start=1)
    ]


def fork(
    session: Session,
    at: At,
    state: Annotated[
        str | None,
        typer.Option(
            "--state", metavar="JSON", help="The fork's state instead of the checkpoint's."
        ),
    ] = None,
    new_session: Annotated[
        str | None,
        typer.Option("--new-session", metavar="ID", help="The new session's id (default: new)."),
    ] = None,
    json_output: Json = False,
    database_url: DatabaseUrl = None,
) -> int:
    """Create a new session from a checkpoint (the source is untouched); continue it with
    `helix-dbos resume NEW_SESSION --app ...`."""
    value = json_option(state, "--state")
    if state is not None and not isinstance(value, dict):
        raise CLIError("--state must be a JSON object")
    url = resolve_url(database_url)
    session = _session(url, session)
    new = _run(url, lambda tt: tt.fork(session, at, state=value, new_session_id=new_session))
    if json_output:
        print_json(
            {"session_id": new, "forked_from_session_id": session, "forked_from_checkpoint_id": at}
        )
    else:
        print(f"Forked session {new} from {session} at {at}.")
    return 0


def prune(
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than",
            metavar="AGE",
            help="Remove what ended longer ago than this: 30d, 12h, 90m, 2w.",
            show_default=False,
        ),
    ],
    keep_last: Annotated[
        int, typer.Option("--keep-last", metavar="K", min=0, help="Checkpoints kept per session.")
    ] = 0,
    batch_size: Annotated[
        int, typer.Option("--batch-size", metavar="N", min=1, help="Rows per statement.")
    ] = 500,
    json_output: Json = False,
    database_url: DatabaseUrl = None,
) -> int:
    """Remove old checkpoints, stream chunks and DBOS workflow records of ended runs (every
    transcript stays; a session with a live run is left alone)."""
    from helix_dbos.runtime.control.time_travel import parse_age  # noqa: PLC0415

    age = parse_age(older_than)
    url = resolve_url(database_url)
    report = _run(
        url, lambda tt: tt.prune(older_than=age, keep_last=keep_last, batch_size=batch_size)
    )
    if json_output:
        print_json(report.model_dump(mode="json"))
    else:
        print(
            f"Pruned {report.checkpoints} checkpoint(s), {report.stream_chunks} stream "
            f"chunk(s) and {report.workflows} workflow record(s) older than "
            f"{report.cutoff.isoformat(timespec='seconds')}."
        )
    return 0


def register(app: typer.Typer) -> None:
    app.command("checkpoints")(checkpoints)
    app.command("fork")(fork)
    app.command("prune")(prune)
