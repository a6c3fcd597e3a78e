"""demo and resume: the commands that run agents in this process and wait for them."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated

import typer

from helix_dbos import demo as quickstart
from helix_dbos.cli.common import (
    AppSpec,
    DatabaseUrl,
    Json,
    Quiet,
    Session,
    load_helix,
    resolve_url,
)
from helix_dbos.cli.live import follow
from helix_dbos.cli.output import print_json, spinner
from helix_dbos.cli.reads import print_transcript, print_usage_table
from helix_dbos.runtime.results import AgentResult


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
    helix = load_helix(app)
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
    print(f"Run {result.run_id} of session {result.session_id}: {result.status}")
    print(f"Output: {json.dumps(result.output) if result.error is None else result.error}\n")
    print(f"Transcript (helix-dbos transcript {result.session_id}):")
    print_transcript(outcome.transcript, width=90)
    print(f"\nUsage (helix-dbos usage --session {result.session_id}):")
    print_usage_table(outcome.usage, "model")
    print(f"\nSession state: {json.dumps(outcome.state)}")
    return 0 if result.ok else 1


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
    app.command("resume")(resume)
