"""demo and resume: the commands that run agents in this process and wait for them."""

from __future__ import annotations

import asyncio
import json
import shutil
from typing import TYPE_CHECKING, Annotated, Any

import typer

from helix_dbos.cli import ids
from helix_dbos.cli.common import (
    AppSpec,
    DatabaseUrl,
    Json,
    Quiet,
    Session,
    load_helix,
    read_connection,
    require_session,
    resolve_url,
)
from helix_dbos.cli.output import print_json, spinner
from helix_dbos.cli.reads import print_transcript, print_usage_table
from helix_dbos.store.database import connect

if TYPE_CHECKING:  # these commands load DBOS when they run, not for --help
    from helix_dbos import demo as quickstart
    from helix_dbos.runtime.steps.results import AgentResult


def resume(
    session: Session,
    app: AppSpec,
    message: Annotated[
        str | None, typer.Option("--message", help="A user message for the new run.")
    ] = None,
    json_output: Json = False,
    quiet: Quiet = False,
) -> int:
    """Continue a session in a new run and wait for it.

    The run executes in this process, so it needs your agents (--app); its steps show on
    stderr as they happen.
    """
    from helix_dbos.cli.live import follow  # noqa: PLC0415

    helix = load_helix(app)
    with read_connection(helix.database_url) as conn:  # a prefix, as tables show ids
        session = require_session(conn, session)
    with spinner("launching DBOS"):
        helix.launch()
    try:

        async def go() -> AgentResult:
            handle = await helix.resume(session, message)
            return await follow(helix, handle, quiet=quiet)

        result = asyncio.run(go())
    finally:
        helix.shutdown()
    if json_output:
        print_json(result.model_dump(mode="json"))
    else:
        print(f"Run {result.run_id} of session {result.session_id}: {result.status}")
        print(f"Output: {result.output if result.error is None else result.error}")
    return 0 if result.status == "completed" else 1


def demo(json_output: Json = False, quiet: Quiet = False, database_url: DatabaseUrl = None) -> int:
    """Run the quickstart agent end to end, then print its transcript and usage.

    The review analyst runs on the embedded PostgreSQL with a scripted model unless a
    database URL or a provider key is set; each step shows on stderr as it happens, and
    the transcript and usage are read back with SQL.
    """
    from helix_dbos import demo as quickstart  # noqa: PLC0415
    from helix_dbos.cli.live import follow  # noqa: PLC0415

    url = resolve_url(database_url)
    with spinner("preparing the database"):
        helix = quickstart.build(url)
        helix.launch()
    try:

        async def go() -> quickstart.DemoRun:
            handle = await helix.execute(quickstart.AGENT_NAME, quickstart.QUESTION)
            return await quickstart.collect(helix, await follow(helix, handle, quiet=quiet))

        outcome = asyncio.run(go())
    finally:
        helix.shutdown()
    result = outcome.result
    if json_output:
        print_json(
            {
                "result": result.model_dump(mode="json"),
                "transcript": outcome.transcript,
                "usage": outcome.usage,
                "state": outcome.state,
            }
        )
        return 0 if result.ok else 1
    # The report fits the terminal, or 100 columns piped; ids as the tables show them.
    width = min(REPORT_WIDTH, shutil.get_terminal_size((REPORT_WIDTH, 24)).columns)
    with connect(url, autocommit=True) as conn:
        run_id = ids.shorten(conn, "run", [result.run_id])[result.run_id]
        session_id = ids.shorten(conn, "session", [result.session_id])[result.session_id]
    print(f"Run {run_id} of session {session_id}: {result.status}")
    print(f"Output: {_json_within(result.output, width) if result.error is None else result.error}")
    print(f"\nTranscript (helix-dbos transcript {session_id}):")
    # SEQ and ROLE take 26 columns ("  5  tool:submit_verdict  "); the message gets the rest.
    print_transcript(outcome.transcript, width=max(20, width - 26))
    print(f"\nUsage (helix-dbos usage --session {session_id}):")
    print_usage_table(outcome.usage, "model")
    print(f"\nSession state: {_json_within(outcome.state, width)}")
    return 0 if result.ok else 1


REPORT_WIDTH = 100


def _json_within(value: Any, width: int) -> str:
    """JSON on one line when it fits in `width` columns, else indented over several."""
    line = json.dumps(value)
    return line if len(line) + 15 <= width else json.dumps(value, indent=2)


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
    app.command("resume")(resume)
