"""The `helix-dbos` command.

Each subcommand is one `add_<name>(subparsers)` function that declares its arguments and
sets `handler=` to a function `(args) -> exit code`; list it in SUBCOMMANDS to register it.
main() turns any exception from a handler into a one-line message and exit code 2, so
operators see "cannot connect to ..." rather than a traceback (set HELIX_DEBUG=1 for one).

Read-only commands (runs, transcript, usage) query SQL directly and never launch DBOS;
answers and run control (approve, deny, submit, interrupt, abort) go through DBOSClient;
only `serve`, `resume` and `demo` run agents, so only they need the agents (`--app`).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import importlib
import importlib.util
import itertools
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import uvicorn

from helix_dbos import demo
from helix_dbos.errors import SessionNotFoundError
from helix_dbos.runtime.executor import HelixDBOS
from helix_dbos.runtime.results import TERMINAL_STATUSES
from helix_dbos.runtime.workers import recover_worker
from helix_dbos.server import bearer_token, create_app, queries
from helix_dbos.server.remote import RemoteControl
from helix_dbos.store import workers as workers_sql
from helix_dbos.store.database import (
    DATABASE_URL_ENV,
    connect,
    ensure_database_exists,
    redact_url,
    resolve_database_url,
)
from helix_dbos.store.migrations import apply_migrations
from helix_dbos.store.workers import WorkerRow

Handler = Callable[[argparse.Namespace], int]
Subparsers = Any  # argparse's _SubParsersAction is private; this is what add_* receives.

EXIT_ERROR = 2
TOKEN_ENV = "HELIX_SERVER_TOKEN"


class CLIError(Exception):
    """A usage problem main() reports as one line (exit 2)."""


def add_database_url_option(parser: argparse.ArgumentParser) -> None:
    """The shared --database-url option (default: $HELIX_DATABASE_URL, else embedded)."""
    parser.add_argument(
        "--database-url",
        metavar="URL",
        default=None,
        help="PostgreSQL URL (default: $HELIX_DATABASE_URL, else an embedded server "
        "in $HELIX_DATA_DIR or ./.helix/pgdata)",
    )


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def add_app_option(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    parser.add_argument(
        "--app",
        metavar="MODULE:ATTR",
        required=required,
        help="your HelixDBOS instance, or a function returning one: `myapp.agents:helix`, "
        "or a file: `examples/server.py:helix`",
    )


# --- output ----------------------------------------------------------------------------


@contextmanager
def progress(message: str) -> Iterator[None]:
    """A spinner on stderr while something slow happens (silent when stderr is not a TTY)."""
    if not sys.stderr.isatty():
        yield
        return
    done = threading.Event()
    started = time.monotonic()

    def spin() -> None:
        for frame in itertools.cycle("|/-\\"):
            elapsed = time.monotonic() - started
            sys.stderr.write(f"\r{frame} {message} {elapsed:4.1f}s")
            sys.stderr.flush()
            if done.wait(0.1):
                break
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _json_default(value: Any) -> Any:
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    return str(value)


def print_json(data: Any) -> None:
    print(json.dumps(data, default=_json_default, indent=2))


def _cell(value: Any, width: int) -> str:
    if value is None:
        text = ""
    elif isinstance(value, dt.datetime):
        text = value.astimezone().strftime("%Y-%m-%d %H:%M:%S")
    elif isinstance(value, (dict, list)):
        text = json.dumps(value, default=_json_default)
    else:
        text = str(value)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def print_table(
    rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]], *, width: int = 60
) -> None:
    """Aligned columns: `columns` is (key, header); numbers align right."""
    cells = [[_cell(row.get(key), width) for key, _ in columns] for row in rows]
    widths = [
        max([len(header)] + [len(r[i]) for r in cells]) for i, (_, header) in enumerate(columns)
    ]
    numeric = [
        all(isinstance(row.get(key), (int, float)) for row in rows) if rows else False
        for key, _ in columns
    ]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    print(line([header for _, header in columns]))
    for row_cells in cells:
        print(line(row_cells))


# --- shared plumbing -------------------------------------------------------------------


def resolve_url(args: argparse.Namespace) -> str:
    """The database URL; starting the embedded PostgreSQL can take a few seconds."""
    if args.database_url or os.environ.get(DATABASE_URL_ENV):
        return resolve_database_url(args.database_url)
    with progress("starting the embedded PostgreSQL"):
        return resolve_database_url(None)


@contextmanager
def read_connection(args: argparse.Namespace) -> Iterator[Any]:
    """A read-only psycopg connection; a database without the helix schema says so."""
    url = resolve_url(args)
    with connect(url, autocommit=True) as conn:
        try:
            yield conn
        except psycopg.errors.UndefinedTable as exc:
            raise CLIError(
                f"the helix schema is missing in {redact_url(url)}: run `helix-dbos migrate`"
            ) from exc


def require_session(conn: Any, session_id: str) -> None:
    if not queries.fetch_sync(conn, queries.session_exists(session_id)):
        raise SessionNotFoundError(session_id)


def load_helix(spec: str) -> HelixDBOS:
    """Import `module:attr` (or `path/file.py:attr`): a HelixDBOS, or a factory returning one."""
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
            f"--app {spec} is a {type(target).__name__}, not a HelixDBOS (or a factory of one)"
        )
    return target


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


# --- serve ---------------------------------------------------------------------------


def add_serve(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve the HTTP API and the approvals inbox",
        description="Serve the HTTP API, the SSE stream and the approvals inbox (/inbox) "
        "with uvicorn. Authentication is required: a bearer token (--token or "
        f"${TOKEN_ENV}), or --allow-unauthenticated for local development.",
    )
    add_app_option(parser)
    parser.add_argument("--host", default="127.0.0.1", help="interface (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    parser.add_argument(
        "--token", default=None, help=f"bearer token clients must send (default: ${TOKEN_ENV})"
    )
    parser.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="serve without authentication (only for a trusted, local network)",
    )
    parser.add_argument("--default-agent", default=None, help="agent for chat requests naming none")
    parser.add_argument("--log-level", default="info", help="uvicorn log level (default: info)")
    parser.add_argument(
        "--no-execute",
        action="store_true",
        help="execute no runs here: enqueue them for `helix-dbos worker` processes",
    )
    parser.set_defaults(handler=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    token = args.token or os.environ.get(TOKEN_ENV)
    if not token and not args.allow_unauthenticated:
        raise CLIError(
            f"refusing to serve without authentication: pass --token (or set {TOKEN_ENV}), "
            "or --allow-unauthenticated for local development"
        )
    helix = load_helix(args.app)
    if args.no_execute:
        helix.executes_runs = False
    app = create_app(
        helix,
        authenticate=bearer_token(token) if token else None,
        allow_unauthenticated=not token,
        default_agent=args.default_agent,
    )
    base = f"http://{args.host}:{args.port}"
    inbox = f"{base}/inbox" + ("?token=…" if token else "")
    role = "enqueuing runs of" if args.no_execute else "serving"
    print(
        f"helix-dbos: {role} {len(helix.agents)} agent(s) ({', '.join(sorted(helix.agents))}) "
        f"on {base}; inbox at {inbox}; API docs at {base}/docs",
        file=sys.stderr,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0


# --- workers ---------------------------------------------------------------------------


def add_worker(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "worker",
        help="run a worker: execute queued and recovered runs of the app's agents",
        description="Launch the app's HelixDBOS as a worker: it takes runs of its agents from "
        "their queues, recovers the runs of dead workers, and runs until SIGTERM or Ctrl-C "
        "(then it stops cleanly; its unfinished runs move to another worker once its lease "
        "lapses). Exit code 75 means the worker fenced itself after losing its lease: start "
        "it again.",
    )
    add_app_option(parser)
    parser.set_defaults(handler=run_worker)


def run_worker(args: argparse.Namespace) -> int:
    helix = load_helix(args.app)
    helix.executes_runs = True
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    helix.launch()
    lease = helix.lease
    assert lease is not None
    print(
        f"helix-dbos: worker {lease.identity.executor_id} serving "
        f"{', '.join(lease.identity.agents) or 'no agent'} "
        f"(lease {lease.lease:g}s); Ctrl-C to stop",
        file=sys.stderr,
        flush=True,
    )
    try:
        while not stop.wait(0.5):
            pass
    finally:
        helix.shutdown()
    return 0


def add_workers(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "workers",
        help="list workers, their leases and their runs",
        description="List every worker registered on the database (live first), with its "
        "lease, agents and unfinished runs, and the queued runs no live worker serves.",
    )
    add_json_option(parser)
    add_database_url_option(parser)
    parser.set_defaults(handler=run_workers)


def _worker_state(worker: WorkerRow) -> str:
    if worker.state == "live" and worker.expired:
        return "expired"
    return worker.state


def run_workers(args: argparse.Namespace) -> int:
    with read_connection(args) as conn:
        workers = workers_sql.list_workers(conn)
        waiting = workers_sql.runs_without_worker(conn)
    if args.json:
        print_json(
            {
                "workers": [{**vars(w), "state": _worker_state(w)} for w in workers],
                "runs_without_worker": [vars(r) for r in waiting],
            }
        )
        return 0
    if not workers:
        print("No workers.")
    else:
        rows = [
            {
                **vars(w),
                "state": _worker_state(w),
                "agents": ", ".join(w.agents) or "-",
                "recovered": f"by {w.recovered_by} ({w.recovered_runs} runs)"
                if w.recovered_by
                else "",
            }
            for w in workers
        ]
        print_table(
            rows,
            [
                ("executor_id", "WORKER"),
                ("state", "STATE"),
                ("host", "HOST"),
                ("pid", "PID"),
                ("application_version", "VERSION"),
                ("agents", "AGENTS"),
                ("pending_runs", "RUNS"),
                ("heartbeat_at", "HEARTBEAT"),
                ("recovered", "RECOVERED"),
            ],
            width=36,
        )
    if waiting:
        print(f"\n{len(waiting)} queued run(s) wait for a worker that serves their agent:")
        print_table(
            [vars(r) for r in waiting],
            [
                ("run_id", "RUN"),
                ("session_id", "SESSION"),
                ("agent_name", "AGENT"),
                ("enqueued_at", "QUEUED"),
            ],
            width=44,
        )
    return 0


def add_recover(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "recover",
        help="hand a dead worker's unfinished runs back to the queues now",
        description="Declare a worker dead and hand its unfinished runs back to the queues, "
        "where a live worker serving each run's agent takes it. Refused while the worker's "
        "lease is live (its runs are still its own). Live workers do this by themselves "
        "once a lease lapses; this is for a fleet with none running, or to be sure.",
    )
    parser.add_argument("executor_id", metavar="WORKER")
    add_database_url_option(parser)
    parser.set_defaults(handler=run_recover)


def run_recover(args: argparse.Namespace) -> int:
    url = resolve_url(args)
    claimant = f"cli:{socket.gethostname()}:{os.getpid()}"
    moved = recover_worker(url, args.executor_id, claimant)
    print(f"Worker {args.executor_id} recovered: {len(moved)} run(s) handed back to the queues.")
    for workflow_id in moved:
        print(f"  {workflow_id}")
    return 0


# --- runs ------------------------------------------------------------------------------

RUN_STATUSES = ("waiting", "running", "paused", "completed", "failed", "interrupted", "aborted")


def add_runs(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "runs",
        help="list runs, most recent first",
        description="List runs, most recent first. --status waiting lists the runs waiting "
        "for a human, with the tool call each waits on.",
    )
    parser.add_argument("--status", choices=RUN_STATUSES, default=None)
    parser.add_argument("--session", metavar="ID", default=None, help="only this session's runs")
    parser.add_argument("--limit", type=int, default=20, help="at most N runs (default: 20)")
    add_json_option(parser)
    add_database_url_option(parser)
    parser.set_defaults(handler=run_runs)


def _run_detail(run: dict[str, Any]) -> str:
    if run["tool_calls"]:
        return "; ".join(
            f"{c['kind'].replace('_', ' ')}: {c['tool_name']} (call {c['tool_call_id']})"
            + (" answered" if c["answered"] else "")
            for c in run["tool_calls"]
        )
    return run["error"] or ""


def _run_worker(run: dict[str, Any]) -> str:
    """The worker executing a live run, or the queue it waits on."""
    if run["workflow_status"] == "ENQUEUED":
        return f"queued ({run['queue_name']})"
    return run["worker"] or ""


def run_runs(args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise CLIError("--limit must be at least 1")
    with read_connection(args) as conn:
        if args.session:
            require_session(conn, args.session)
        runs = queries.runs_with_calls_sync(
            conn, status=args.status, session_id=args.session, limit=args.limit
        )
    if args.json:
        print_json(runs)
        return 0
    if not runs:
        print("No runs.")
        return 0
    rows = [{**r, "detail": _run_detail(r), "where": _run_worker(r)} for r in runs]
    print_table(
        rows,
        [
            ("run_id", "RUN"),
            ("session_id", "SESSION"),
            ("agent_name", "AGENT"),
            ("turn", "TURN"),
            ("status", "STATUS"),
            ("step_count", "STEPS"),
            ("started_at", "STARTED"),
            ("where", "WORKER"),
            ("detail", "WAITING ON / ERROR"),
        ],
        width=44,
    )
    return 0


# --- transcript ------------------------------------------------------------------------


def add_transcript(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "transcript",
        help="print a session's messages",
        description="Print a session's messages in order (helix.messages).",
    )
    parser.add_argument("session", metavar="SESSION")
    add_json_option(parser)
    add_database_url_option(parser)
    parser.set_defaults(handler=run_transcript)


def _message_text(message: dict[str, Any]) -> str:
    parts = [message["content"]] if message["content"] else []
    parts += [
        f"-> {c.get('name')}({json.dumps(c.get('arguments'), default=_json_default)}) [{c.get('id')}]"
        for c in message["tool_calls"] or []
    ]
    if message["role"] == "tool":
        label = f"[{message['tool_call_id']}]" + (" error" if message["is_error"] else "")
        parts = [f"{label} {' '.join(parts)}"]
    return " ".join(parts)


def transcript_rows(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "seq": m["seq"],
            "role": m["role"] if m["role"] != "tool" else f"tool:{m['tool_name']}",
            "text": _message_text(m),
        }
        for m in messages
    ]


def run_transcript(args: argparse.Namespace) -> int:
    with read_connection(args) as conn:
        require_session(conn, args.session)
        messages = queries.fetch_sync(conn, queries.transcript(args.session))
    if args.json:
        print_json(messages)
        return 0
    print_table(
        transcript_rows(messages),
        [("seq", "SEQ"), ("role", "ROLE"), ("text", "MESSAGE")],
        width=100,
    )
    return 0


# --- usage -----------------------------------------------------------------------------

USAGE_COLUMNS = [
    ("llm_calls", "LLM CALLS"),
    ("tool_calls", "TOOL CALLS"),
    ("input_tokens", "INPUT"),
    ("output_tokens", "OUTPUT"),
    ("cache_read_tokens", "CACHE READ"),
    ("cache_write_tokens", "CACHE WRITE"),
    ("reasoning_tokens", "REASONING"),
]


def add_usage(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "usage",
        help="token and call counts by model, session or agent",
        description="Token and call counts from helix.usage, grouped by model (LLM calls), "
        "session or agent.",
    )
    parser.add_argument("--by", choices=("model", "session", "agent"), default="model")
    parser.add_argument("--session", metavar="ID", default=None, help="only this session")
    add_json_option(parser)
    add_database_url_option(parser)
    parser.set_defaults(handler=run_usage)


def print_usage_table(rows: list[dict[str, Any]], by: str) -> None:
    """By model there are only LLM calls, so the tool-call column is left out."""
    columns = [c for c in USAGE_COLUMNS if not (by == "model" and c[0] == "tool_calls")]
    if len(rows) > 1:
        total = {"key": "(total)"} | {k: sum(r[k] for r in rows) for k, _ in columns}
        rows = [*rows, total]
    print_table(rows, [("key", by.upper()), *columns])


def run_usage(args: argparse.Namespace) -> int:
    with read_connection(args) as conn:
        if args.session:
            require_session(conn, args.session)
        rows = queries.fetch_sync(conn, queries.usage(by=args.by, session_id=args.session))
    if args.json:
        print_json([{args.by: r.pop("key"), **r} for r in rows])
        return 0
    if not rows:
        print("No usage recorded.")
        return 0
    print_usage_table(rows, args.by)
    return 0


# --- answers: approve, deny, submit ----------------------------------------------------


def _add_answer_parser(
    subparsers: Subparsers, name: str, help_text: str
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name, help=help_text, description=help_text[0].upper() + help_text[1:] + "."
    )
    parser.add_argument("session", metavar="SESSION")
    parser.add_argument(
        "call", metavar="CALL", help="the tool call id (see `helix-dbos runs --status waiting`)"
    )
    add_database_url_option(parser)
    return parser


def add_approve(subparsers: Subparsers) -> None:
    parser = _add_answer_parser(
        subparsers, "approve", "approve a tool call that waits for approval"
    )
    parser.add_argument("--reason", default=None)
    parser.set_defaults(handler=run_approve, approved=True)


def add_deny(subparsers: Subparsers) -> None:
    parser = _add_answer_parser(subparsers, "deny", "deny a tool call; the model gets the reason")
    parser.add_argument("--reason", default=None)
    parser.set_defaults(handler=run_approve, approved=False)


def _remote(args: argparse.Namespace) -> Any:
    return RemoteControl(resolve_url(args))


def run_approve(args: argparse.Namespace) -> int:
    remote = _remote(args)
    try:
        target = remote.approve(args.session, args.call, args.approved, args.reason)
    finally:
        remote.close()
    verb = "Approved" if args.approved else "Denied"
    print(f"{verb} {target.tool_name} (call {args.call}) of run {target.run_id}.")
    return 0


def add_submit(subparsers: Subparsers) -> None:
    parser = _add_answer_parser(subparsers, "submit", "hand in a client tool's result or error")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--result", metavar="JSON", help="the tool's result, as JSON")
    group.add_argument("--error", metavar="TEXT", help="the tool failed with this message")
    parser.set_defaults(handler=run_submit)


def run_submit(args: argparse.Namespace) -> int:
    result: Any = None
    if args.result is not None:
        try:
            result = json.loads(args.result)
        except json.JSONDecodeError as exc:
            raise CLIError(f"--result is not valid JSON: {exc}") from exc
    remote = _remote(args)
    try:
        target = remote.submit(args.session, args.call, result=result, error=args.error)
    finally:
        remote.close()
    what = "an error" if args.error is not None else "the result"
    print(f"Submitted {what} for {target.tool_name} (call {args.call}) of run {target.run_id}.")
    return 0


# --- run control: interrupt, abort, resume ---------------------------------------------


def _add_control_parser(
    subparsers: Subparsers, name: str, help_text: str
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name, help=help_text, description=help_text[0].upper() + help_text[1:] + "."
    )
    parser.add_argument("session", metavar="SESSION")
    parser.add_argument("--reason", default=None)
    add_database_url_option(parser)
    return parser


def add_interrupt(subparsers: Subparsers) -> None:
    parser = _add_control_parser(
        subparsers, "interrupt", "stop the session's live run at its next step boundary"
    )
    parser.set_defaults(handler=run_interrupt)


def run_interrupt(args: argparse.Namespace) -> int:
    remote = _remote(args)
    try:
        target = remote.interrupt(args.session, args.reason)
    finally:
        remote.close()
    print(f"Interrupt requested for run {target.run_id}; it stops at its next step boundary.")
    return 0


def add_abort(subparsers: Subparsers) -> None:
    parser = _add_control_parser(
        subparsers, "abort", "cancel the session's live run now (dangling calls get error results)"
    )
    parser.set_defaults(handler=run_abort)


def run_abort(args: argparse.Namespace) -> int:
    remote = _remote(args)
    try:
        target = remote.abort(args.session, args.reason)
    finally:
        remote.close()
    print(f"Aborted run {target.run_id}; the session can be continued with `helix-dbos resume`.")
    return 0


def add_resume(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "resume",
        help="continue a session in a new run and wait for it",
        description="Continue an interrupted, aborted, failed or completed session in a new "
        "run. This process runs it (so it needs your agents: --app) and waits for it to end.",
    )
    parser.add_argument("session", metavar="SESSION")
    parser.add_argument("--message", default=None, help="a user message for the new run")
    add_app_option(parser)
    add_json_option(parser)
    parser.set_defaults(handler=run_resume)


async def _wait_for_end(helix: HelixDBOS, run_id: str) -> Any:
    """Wait for the run's result; say once what it waits for when a human must answer."""
    announced = False
    while True:
        run = await helix.get_run(run_id)
        if run.status in TERMINAL_STATUSES:
            return await (await helix.get_handle(run_id)).result()
        if run.status == "waiting" and not announced:
            for call in await helix.pending_tool_calls(run.session_id):
                command = "approve" if call["kind"] == "approval" else "submit"
                print(
                    f"\nRun {run_id} waits for {call['kind'].replace('_', ' ')} of "
                    f"{call['tool_name']}({json.dumps(call['input'], default=_json_default)}): "
                    f"helix-dbos {command} {run.session_id} {call['tool_call_id']}",
                    file=sys.stderr,
                )
            announced = True
        await asyncio.sleep(0.2)


def run_resume(args: argparse.Namespace) -> int:
    helix = load_helix(args.app)
    with progress("launching DBOS"):
        helix.launch()
    try:

        async def go() -> Any:
            handle = await helix.resume(args.session, args.message)
            with progress(f"running {handle.run_id}"):
                return await _wait_for_end(helix, handle.run_id)

        result = asyncio.run(go())
    finally:
        helix.shutdown()
    if args.json:
        print_json(result.model_dump(mode="json"))
    else:
        print(f"Run {result.run_id} of session {result.session_id}: {result.status}")
        print(f"Output: {result.output if result.error is None else result.error}")
    return 0 if result.status == "completed" else 1


# --- demo ------------------------------------------------------------------------------


def add_demo(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run the quickstart agent end to end and print its transcript and usage",
        description="Run the quickstart's review analyst end to end (embedded PostgreSQL "
        "and a scripted model unless a database URL or a provider key is set), then print "
        "the transcript and usage read back with SQL.",
    )
    add_json_option(parser)
    add_database_url_option(parser)
    parser.set_defaults(handler=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    url = resolve_url(args)
    with progress("preparing the database"):
        helix = demo.build(url)
        helix.launch()
    try:

        async def go() -> demo.DemoRun:
            with progress("running the review analyst"):
                return await demo.run(helix)

        outcome = asyncio.run(go())
    finally:
        helix.shutdown()
    result = outcome.result
    if args.json:
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
    print_table(
        transcript_rows(outcome.transcript),
        [("seq", "SEQ"), ("role", "ROLE"), ("text", "MESSAGE")],
        width=90,
    )
    print(f"\nUsage (helix-dbos usage --session {result.session_id}):")
    print_usage_table(outcome.usage, "model")
    print(f"\nSession state: {json.dumps(outcome.state)}")
    return 0 if result.ok else 1


# --- registration --------------------------------------------------------------------

SUBCOMMANDS: list[Callable[[Subparsers], None]] = [
    add_migrate,
    add_demo,
    add_serve,
    add_worker,
    add_workers,
    add_recover,
    add_runs,
    add_transcript,
    add_usage,
    add_approve,
    add_deny,
    add_submit,
    add_interrupt,
    add_abort,
    add_resume,
]


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
    except BrokenPipeError:  # `helix-dbos runs | head`: the reader left, which is fine
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:
        if os.environ.get("HELIX_DEBUG"):
            raise
        print(f"helix-dbos {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    raise SystemExit(main())
