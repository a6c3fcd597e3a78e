"""runs, transcript, usage: plain SQL reads that never launch DBOS."""

from __future__ import annotations

import json
from enum import Enum
from typing import Annotated, Any

import typer

from helix_dbos.cli import ids
from helix_dbos.cli.common import (
    CLIError,
    DatabaseUrl,
    Json,
    Session,
    read_connection,
    require_session,
)
from helix_dbos.cli.output import Column, json_default, print_json, print_table
from helix_dbos.server import queries


class RunStatus(str, Enum):
    waiting = "waiting"
    queued = "queued"
    running = "running"
    paused = "paused"
    completed = "completed"
    failed = "failed"
    interrupted = "interrupted"
    aborted = "aborted"


class UsageBy(str, Enum):
    model = "model"
    session = "session"
    agent = "agent"
    root = "root"  # a root session with its sub-agents' sessions


def run_detail(run: dict[str, Any]) -> str:
    """What a waiting run waits on, or why a run failed."""
    if run["tool_calls"]:
        return "; ".join(
            f"{c['kind'].replace('_', ' ')}: {c['tool_name']} (call {c['tool_call_id']})"
            + (" answered" if c["answered"] else "")
            for c in run["tool_calls"]
        )
    if run.get("stop_reason") and run["status"] == "failed":  # a control ended it
        return f"{run['stop_reason']}: {run['error'] or ''}"
    return run["error"] or ""


def run_worker(run: dict[str, Any]) -> str:
    """The worker executing a live run, or the queue it waits on (for a worker, or for a
    call slot of its model)."""
    if run.get("queued_for") and run["status"] == "running":
        return f"queued ({run['queued_for']})"
    if run["workflow_status"] == "ENQUEUED":
        return f"queued ({run['queue_name']})"
    return run["worker"] or ""


def shown_status(run: dict[str, Any]) -> str:
    """A live run waiting for a call slot of its model shows as `queued`."""
    return "queued" if run["status"] == "running" and run.get("queued_for") else run["status"]


RUN_COLUMNS = [
    Column("run_id", "RUN", is_id=True),
    Column("session_id", "SESSION", is_id=True),
    Column("agent_name", "AGENT", shrinks=True),
    Column("turn", "TURN"),
    Column("status", "STATUS"),
    Column("step_count", "STEPS"),
    Column("depth", "DEPTH", drop=3),
    Column("started_at", "STARTED", drop=1),
    Column("where", "WORKER", shrinks=True, drop=2),
    Column("detail", "WAITING ON / ERROR", wraps=True),
]


def runs(
    status: Annotated[
        RunStatus | None, typer.Option("--status", help="Only runs in this status.")
    ] = None,
    session: Annotated[
        str | None,
        typer.Option(
            "--session",
            metavar="ID",
            help="Only this session's runs (an id or its prefix) and those of the sessions "
            "below it (sub-agents, companions); DEPTH says how far below its root each run's "
            "session is.",
        ),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", metavar="N", min=1, help="At most N runs.")] = 20,
    version: Annotated[
        str | None,
        typer.Option(
            "--version",
            metavar="VERSION",
            help="Only runs started by this application version (only a worker of that "
            "version resumes them; see `helix-dbos doctor`).",
        ),
    ] = None,
    json_output: Json = False,
    database_url: DatabaseUrl = None,
) -> int:
    """List runs, most recent first; `--status waiting` shows what each waits on."""
    with read_connection(database_url) as conn:
        if session:
            session = require_session(conn, session)
        found = queries.runs_with_calls_sync(
            conn,
            status=status.value if status else None,
            session_id=session,
            limit=limit,
            version=version,
        )
        if not json_output:
            runs_short = ids.shorten(conn, "run", (r["run_id"] for r in found))
            sessions_short = ids.shorten(conn, "session", (r["session_id"] for r in found))
    if json_output:
        print_json(found)
    elif not found:
        print("No runs.")
    else:
        rows = [
            {
                **r,
                "run_id": runs_short[r["run_id"]],
                "session_id": sessions_short[r["session_id"]],
                "detail": run_detail(r),
                "where": run_worker(r),
                "status": shown_status(r),
            }
            for r in found
        ]
        # DEPTH only when a run below a root is listed: a column of zeros says nothing.
        below = any(r.get("depth") for r in found)
        columns = [c for c in RUN_COLUMNS if below or c.key != "depth"]
        print_table(rows, columns, width=44)
    return 0


def message_text(message: dict[str, Any]) -> str:
    """A message on one line: its text, then each tool call it makes."""
    parts = [message["content"]] if message["content"] else []
    parts += [
        f"-> {c.get('name')}({json.dumps(c.get('arguments'), default=json_default)}) [{c.get('id')}]"
        for c in message["tool_calls"] or []
    ]
    parts += [part_link(p) for p in message.get("parts") or []]
    if message["role"] == "tool":
        label = f"[{message['tool_call_id']}]" + (" error" if message["is_error"] else "")
        parts = [f"{label} {' '.join(parts)}"]
    return " ".join(parts)


def part_link(part: dict[str, Any]) -> str:
    """An image or document of the message by name: a stored part's sha256 (its bytes,
    never printed, are at `GET /sessions/{id}/parts/{sha256}`), or its URL."""
    if part.get("kind") != "blob":
        return f"[{part.get('kind')}: {part.get('url')}]"
    sha = str(part.get("sha256"))
    name = part.get("identifier") or sha[:12]
    return f"[file {name} ({part.get('media_type')}, {part.get('size')} bytes) sha256:{sha}]"


def transcript_rows(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "seq": m["seq"],
            "role": m["role"] if m["role"] != "tool" else f"tool:{m['tool_name']}",
            "text": message_text(m),
        }
        for m in messages
    ]


TRANSCRIPT_COLUMNS = [
    Column("seq", "SEQ"),
    Column("role", "ROLE"),
    Column("text", "MESSAGE", wraps=True),
]


def print_transcript(messages: list[dict[str, Any]], *, width: int = 100) -> None:
    print_table(transcript_rows(messages), TRANSCRIPT_COLUMNS, width=width)


def transcript(
    session: Session,
    at: Annotated[
        str | None,
        typer.Option("--at", metavar="CHECKPOINT", help="As it was at this checkpoint."),
    ] = None,
    json_output: Json = False,
    database_url: DatabaseUrl = None,
) -> int:
    """Print a session's messages in order (helix.messages), or as they were at a
    checkpoint (--at)."""
    if at is not None:
        from helix_dbos.cli.checkpoints import transcript_at  # noqa: PLC0415

        messages = transcript_at(session, at, database_url)
    else:
        with read_connection(database_url) as conn:
            session = require_session(conn, session)
            messages = queries.fetch_sync(conn, queries.transcript(session))
    if json_output:
        print_json(messages)
    else:
        print_transcript(messages)
    return 0


USAGE_COLUMNS = [
    Column("llm_calls", "LLM CALLS"),
    Column("tool_calls", "TOOL CALLS"),
    Column("input_tokens", "INPUT"),
    Column("output_tokens", "OUTPUT"),
    Column("cache_read_tokens", "CACHE READ", drop=1),
    Column("cache_write_tokens", "CACHE WRITE", drop=2),
    Column("reasoning_tokens", "REASONING", drop=3),
    Column("cost_usd", "COST USD"),
]


def print_usage_table(
    rows: list[dict[str, Any]], by: str, short: dict[str, str] | None = None
) -> None:
    """By model there are only LLM calls, so the tool-call column is left out. Session
    keys are shown as `short` gives them; model and agent names may be cut, numbers never."""
    columns = [c for c in USAGE_COLUMNS if not (by == "model" and c.key == "tool_calls")]
    short = short or {}
    rows = [
        {**r, "key": short.get(r["key"], r["key"]), "cost_usd": _usd(r.get("cost_usd"))}
        for r in rows
    ]
    if len(rows) > 1:
        total = {"key": "(total)"} | {c.key: _total(rows, c.key) for c in columns}
        rows = [*rows, total]
    names = by in ("model", "agent")
    key = Column("key", by.upper(), shrinks=names, is_id=not names)
    print_table(rows, [key, *columns])


def _usd(value: float | None) -> float | None:
    """A cost to the millionth of a dollar; empty where nothing was priced."""
    return round(value, 6) if value is not None else None


def _total(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    if not values:
        return None
    return _usd(sum(values)) if key == "cost_usd" else sum(values)


def usage(
    by: Annotated[
        UsageBy,
        typer.Option("--by", help="Group by model, session, agent or root session."),
    ] = UsageBy.model,
    session: Annotated[
        str | None,
        typer.Option("--session", metavar="ID", help="Only this session (an id or its prefix)."),
    ] = None,
    children: Annotated[
        bool,
        typer.Option(
            "--children",
            help="With --session: the session and every session below it "
            "(its sub-agents and companions, and theirs).",
        ),
    ] = False,
    json_output: Json = False,
    database_url: DatabaseUrl = None,
) -> int:
    """Calls, tokens and cost in USD from helix.usage, by model (LLM calls), session, agent
    or root session (with its sub-agents' sessions)."""
    if children and not session:
        raise CLIError("--children needs --session ID")
    with read_connection(database_url) as conn:
        if session:
            session = require_session(conn, session)
        query = queries.usage(by=by.value, session_id=session, include_children=children)
        rows = queries.fetch_sync(conn, query)
        keyed_by_session = by in (UsageBy.session, UsageBy.root) and not json_output
        short = ids.shorten(conn, "session", (r["key"] for r in rows)) if keyed_by_session else {}
    if json_output:
        print_json([{by.value: r.pop("key"), **r} for r in rows])
    elif not rows:
        print("No usage recorded.")
    else:
        print_usage_table(rows, by.value, short)
    return 0


def register(app: typer.Typer) -> None:
    app.command("runs")(runs)
    app.command("transcript")(transcript)
    app.command("usage")(usage)
