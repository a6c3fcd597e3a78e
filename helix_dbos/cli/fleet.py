"""serve, worker, workers, recover: the processes of a fleet and the view over them."""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Annotated, Any

import typer

from helix_dbos.cli.common import (
    TOKEN_ENV,
    AppSpec,
    CLIError,
    DatabaseUrl,
    Json,
    load_helix,
    read_connection,
    resolve_url,
)
from helix_dbos.cli.output import Column, plural, print_json, print_table
from helix_dbos.runtime.dbos import worker_workflows
from helix_dbos.server.http.limits import ServeLimits, with_header_timeout
from helix_dbos.store.features.workers import WorkerRow


def serve(
    app: AppSpec,
    host: Annotated[str, typer.Option("--host", help="Interface.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port.")] = 8000,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            help=f"Bearer token clients must send. Visible to every user in `ps`: prefer "
            f"${TOKEN_ENV} or --token-file.",
        ),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            "--token-file",
            metavar="PATH",
            help="Read the bearer token from this file (its first line).",
            show_default=False,
        ),
    ] = None,
    allow_unauthenticated: Annotated[
        bool,
        typer.Option(
            "--allow-unauthenticated",
            help="Serve without authentication (trusted local network only).",
        ),
    ] = False,
    default_agent: Annotated[
        str | None, typer.Option("--default-agent", help="Agent for chat requests naming none.")
    ] = None,
    log_level: Annotated[str, typer.Option("--log-level", help="uvicorn log level.")] = "info",
    limit_concurrency: Annotated[
        int,
        typer.Option(
            "--limit-concurrency", min=1, help="Connections and tasks at once; past it, 503."
        ),
    ] = ServeLimits.limit_concurrency,
    timeout_keep_alive: Annotated[
        int,
        typer.Option("--timeout-keep-alive", min=1, help="Seconds an idle connection stays."),
    ] = ServeLimits.timeout_keep_alive,
    header_timeout: Annotated[
        float,
        typer.Option(
            "--header-timeout", min=0.1, help="Seconds a request's headers may take to arrive."
        ),
    ] = ServeLimits.header_timeout,
    no_execute: Annotated[
        bool,
        typer.Option(
            "--no-execute", help="Execute no runs here: enqueue them for `helix-dbos worker`."
        ),
    ] = False,
    mcp: Annotated[
        bool, typer.Option("--mcp", help="Serve every agent as an MCP tool at /mcp (extra `mcp`).")
    ] = False,
    mcp_agent: Annotated[
        list[str] | None,
        typer.Option(
            "--mcp-agent", metavar="NAME", help="Serve this agent as an MCP tool (repeatable)."
        ),
    ] = None,
) -> int:
    """Serve the HTTP API, the SSE stream and the approvals inbox (/inbox).

    Authentication is required: a bearer token ($HELIX_SERVER_TOKEN, --token-file or
    --token), or --allow-unauthenticated for local development.
    """
    import uvicorn  # noqa: PLC0415 - FastAPI and uvicorn only for `serve`

    from helix_dbos.server import bearer_token, create_app  # noqa: PLC0415

    token = server_token(token, token_file)
    if not token and not allow_unauthenticated:
        raise CLIError(
            f"refusing to serve without authentication: set {TOKEN_ENV} (or pass --token-file), "
            "or --allow-unauthenticated for local development"
        )
    try:
        authenticate = bearer_token(token) if token else None
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    helix = load_helix(app)
    if no_execute:
        helix.executes_runs = False
    try:
        server = create_app(
            helix,
            authenticate=authenticate,
            allow_unauthenticated=not token,
            allowed_hosts=None if token else unauthenticated_hosts(host),
            default_agent=default_agent,
            mcp_agents=mcp_agent or mcp,
        )
    except (ValueError, ImportError) as exc:  # an unknown agent; no `mcp` extra
        raise CLIError(str(exc)) from None
    base = f"http://{host}:{port}"
    role = "enqueuing runs of" if no_execute else "serving"
    sign_in = " (sign in there with the token)" if token else ""
    print(
        f"helix-dbos: {role} {plural(len(helix.agents), 'agent')} ({', '.join(sorted(helix.agents))}) "
        f"on {base}; inbox at {base}/inbox{sign_in}; API docs at {base}/docs"
        + (f"; MCP at {base}/mcp" if mcp_agent or mcp else ""),
        file=sys.stderr,
    )
    uvicorn.run(
        server,
        host=host,
        port=port,
        log_level=log_level,
        http=with_header_timeout(header_timeout),
        limit_concurrency=limit_concurrency,
        timeout_keep_alive=timeout_keep_alive,
        backlog=ServeLimits.backlog,
    )
    return 0


def server_token(token: str | None, token_file: Path | None) -> str | None:
    """--token (with a warning: `ps` shows it), else --token-file, else $HELIX_SERVER_TOKEN."""
    if token is not None and token_file is not None:
        raise CLIError("pass --token or --token-file, not both")
    if token is not None:
        print(
            f"helix-dbos: warning: --token is visible to every user of this machine (ps, "
            f"shell history); prefer {TOKEN_ENV} or --token-file",
            file=sys.stderr,
        )
        return token
    if token_file is not None:
        try:
            lines = token_file.read_text("utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise CLIError(f"--token-file {token_file}: {exc}") from None
        first = lines[0].strip() if lines else ""
        if not first:
            raise CLIError(f"--token-file {token_file} is empty")
        return first
    return os.environ.get(TOKEN_ENV) or None


def unauthenticated_hosts(host: str) -> list[str]:
    """The Host headers served without a token: loopback names, and the bound address
    when it is a specific one (0.0.0.0 adds nothing: name it with --host)."""
    hosts = ["localhost", "127.0.0.1", "::1"]
    if host not in ("0.0.0.0", "::", ""):
        hosts.append(host)
    return hosts


def worker(app: AppSpec) -> int:
    """Run a worker that executes queued and recovered runs of the app's agents.

    It runs until SIGTERM or Ctrl-C, then stops cleanly (its row says `stopped`). While
    the database is out of reach it starts no new step and waits; it exits with code 75
    only if another live process took its executor id.
    """
    helix = load_helix(app)
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


def worker_state(worker: WorkerRow) -> str:
    if worker.state == "live" and worker.expired:
        return "expired"
    return worker.state


WORKER_COLUMNS = [
    Column("executor_id", "WORKER"),
    Column("state", "STATE"),
    Column("host", "HOST"),
    Column("pid", "PID"),
    Column("application_version", "VERSION"),
    Column("agents", "AGENTS", wraps=True),
    Column("pending_runs", "RUNS"),
    Column("heartbeat_at", "HEARTBEAT"),
    Column("recovered", "RECOVERED", wraps=True),
]
QUEUED_COLUMNS = [
    Column("run_id", "RUN"),
    Column("session_id", "SESSION"),
    Column("agent_name", "AGENT"),
    Column("enqueued_at", "QUEUED"),
]


def worker_row(w: WorkerRow) -> dict[str, Any]:
    recovered = f"by {w.recovered_by} ({w.recovered_runs} runs)" if w.recovered_by else ""
    return {
        **vars(w),
        "state": worker_state(w),
        "agents": ", ".join(w.agents) or "-",
        "recovered": recovered,
    }


def workers(
    everything: Annotated[
        bool,
        typer.Option(
            "--all", help="Also workers that stopped or died (kept an hour), not only live ones."
        ),
    ] = False,
    json_output: Json = False,
    database_url: DatabaseUrl = None,
) -> int:
    """List live workers (and any other that still holds unfinished runs), their leases
    and runs, and queued runs no live worker serves."""
    with read_connection(database_url) as conn:
        found = worker_workflows.list_workers(conn, everything=everything)
        waiting = worker_workflows.runs_without_worker(conn)
    if json_output:
        print_json(
            {
                "workers": [{**vars(w), "state": worker_state(w)} for w in found],
                "runs_without_worker": [vars(r) for r in waiting],
            }
        )
        return 0
    if not found:
        print(
            "No workers." if everything else "No live workers (--all lists stopped and dead ones)."
        )
    else:
        print_table([worker_row(w) for w in found], WORKER_COLUMNS, width=36)
    if waiting:
        print(f"\n{len(waiting)} queued run(s) wait for a worker that serves their agent:")
        print_table([vars(r) for r in waiting], QUEUED_COLUMNS, width=44)
    return 0


def recover(
    executor_id: Annotated[
        str, typer.Argument(metavar="WORKER", help="The worker's executor id.", show_default=False)
    ],
    json_output: Json = False,
    database_url: DatabaseUrl = None,
) -> int:
    """Hand a dead worker's unfinished runs back to the queues now.

    Refused while its lease is live; live workers do this by themselves once it dies.
    """
    url = resolve_url(database_url)
    claimant = f"cli:{socket.gethostname()}:{os.getpid()}"
    from helix_dbos.runtime.process.workers import recover_worker  # noqa: PLC0415 - loads DBOS

    moved = recover_worker(url, executor_id, claimant)
    if json_output:
        print_json({"worker": executor_id, "recovered_by": claimant, "workflow_ids": moved})
        return 0
    print(f"Worker {executor_id} recovered: {len(moved)} run(s) handed back to the queues.")
    for workflow_id in moved:
        print(f"  {workflow_id}")
    return 0


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
    app.command("worker")(worker)
    app.command("workers")(workers)
    app.command("recover")(recover)
