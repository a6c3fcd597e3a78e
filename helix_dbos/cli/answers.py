"""approve, deny, submit, interrupt, abort: checked with SQL, sent with DBOSClient.

They never launch DBOS, so they work against a server running elsewhere, and an answer
is applied once whichever way it arrives (the CLI, the inbox, DBOS.send).
"""

from __future__ import annotations

import contextlib
import getpass
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer

from helix_dbos.api.answers import ClientResult, verdict
from helix_dbos.cli.common import (
    CLIError,
    DatabaseUrl,
    Json,
    Reason,
    Session,
    json_option,
    resolve_url,
)
from helix_dbos.cli.ids import resolve
from helix_dbos.cli.output import print_json
from helix_dbos.cli.visible import escape_invisible
from helix_dbos.errors import RunNotActiveError
from helix_dbos.store.database import connect
from helix_dbos.store.features import run_versions

if TYPE_CHECKING:  # DBOSClient and SQLAlchemy load when an answer is sent, not for --help
    from helix_dbos.server.remote import RemoteControl, Target

Call = Annotated[
    str,
    typer.Argument(
        metavar="CALL",
        help="The tool call id (see `helix-dbos runs --status waiting`).",
        show_default=False,
    ),
]


@contextmanager
def remote(database_url: str | None, session: str) -> Iterator[tuple[RemoteControl, str]]:
    """The control that sends answers, and the full id of the session `session` names
    (an id or a unique prefix of one, as tables show them)."""
    from helix_dbos.server.remote import RemoteControl  # noqa: PLC0415

    url = resolve_url(database_url)
    with connect(url, autocommit=True) as conn:
        session = resolve(conn, "session", session)
    who = f"{getpass.getuser()}@{socket.gethostname()} (cli)"
    control = RemoteControl(url, answered_by=who)
    try:
        yield control, session
    finally:
        control.close()


def report(json_output: bool, action: str, target: Target, text: str, **extra: Any) -> int:
    """One sentence for people, or the same facts as JSON."""
    if json_output:
        print_json(
            {
                "action": action,
                "session_id": target.session_id,
                "run_id": target.run_id,
                "workflow_id": target.workflow_id,
                **extra,
            }
        )
    else:
        print(text)
    return 0


def _answer(approved: bool) -> Callable[..., int]:
    def answer(
        session: Session,
        call: Call,
        reason: Reason = None,
        json_output: Json = False,
        database_url: DatabaseUrl = None,
    ) -> int:
        with remote(database_url, session) as (control, full):
            target = control.answer(full, call, verdict(approved, reason))
        verb = "Approved" if approved else "Denied"
        return report(
            json_output,
            verb.lower(),
            target,
            f"{verb} {escape_invisible(str(target.tool_name))} (call {call}) of run "
            f"{target.run_id}.",
            tool_call_id=call,
            tool_name=target.tool_name,
        )

    answer.__doc__ = (
        "Approve a tool call that waits for approval."
        if approved
        else "Deny a tool call that waits for approval; the model gets the reason."
    )
    return answer


def submit(
    session: Session,
    call: Call,
    result: Annotated[
        str | None, typer.Option("--result", metavar="JSON", help="The tool's result, as JSON.")
    ] = None,
    error: Annotated[
        str | None, typer.Option("--error", metavar="TEXT", help="The tool failed with this.")
    ] = None,
    json_output: Json = False,
    database_url: DatabaseUrl = None,
) -> int:
    """Hand in a client tool's result (--result JSON) or its error (--error TEXT)."""
    if (result is None) == (error is None):
        raise CLIError("pass exactly one of --result JSON or --error TEXT")
    value = json_option(result, "--result")
    with remote(database_url, session) as (control, full):
        target = control.answer(full, call, ClientResult(value, error))
    what = "an error" if error is not None else "the result"
    return report(
        json_output,
        "submitted",
        target,
        f"Submitted {what} for {escape_invisible(str(target.tool_name))} (call {call}) of run "
        f"{target.run_id}.",
        tool_call_id=call,
        tool_name=target.tool_name,
    )


def interrupt(
    session: Session,
    reason: Reason = None,
    json_output: Json = False,
    database_url: DatabaseUrl = None,
) -> int:
    """Stop the session's live run, and those of the sessions below it (sub-agents,
    companions), at their next step boundary.

    A run that waits for a human stops at once.
    """
    with remote(database_url, session) as (control, full):
        targets = control.interrupt(full, reason)
    return report_control(
        json_output,
        "interrupt_requested",
        full,
        targets,
        "Interrupt requested for {runs}; each stops at its next step boundary.",
    )


def abort(
    session: Annotated[
        str | None,
        typer.Argument(
            metavar="[SESSION]",
            help="The session id, or a prefix of it (or --version).",
            show_default=False,
        ),
    ] = None,
    version: Annotated[
        str | None,
        typer.Option(
            "--version",
            metavar="VERSION",
            help="Instead of a session: every live run started by this application version "
            "that no live worker runs (`helix-dbos doctor` lists them).",
        ),
    ] = None,
    reason: Reason = None,
    json_output: Json = False,
    database_url: DatabaseUrl = None,
) -> int:
    """Cancel the session's live run, and those of the sessions below it, now; dangling
    calls get error results."""
    if (session is None) == (version is None):
        raise CLIError("give a SESSION, or --version VERSION (not both)")
    if version is not None:
        return abort_version(version, reason, json_output, database_url)
    assert session is not None
    with remote(database_url, session) as (control, full):
        targets = control.abort(full, reason)
    return report_control(
        json_output,
        "aborted",
        full,
        targets,
        "Aborted {runs}; each session can be continued with `helix-dbos resume`.",
    )


def abort_version(
    version: str, reason: str | None, json_output: bool, database_url: str | None
) -> int:
    """Abort the runs no process will resume: live runs of `version` while no live worker
    runs it (with each one's tree below it). Runs of a version a live worker runs are
    left alone: abort those by session."""
    from helix_dbos.server.remote import RemoteControl  # noqa: PLC0415 - loads DBOS

    url = resolve_url(database_url)
    with connect(url, autocommit=True) as conn:
        stranded = run_versions.stranded_runs(conn, version)
    why = reason or f"no live worker runs application version {version}"
    control = RemoteControl(url, answered_by=f"{getpass.getuser()}@{socket.gethostname()} (cli)")
    aborted: list[str] = []
    try:
        for run in stranded:
            if run.run_id in aborted:  # below a session aborted already
                continue
            with contextlib.suppress(RunNotActiveError):  # it ended meanwhile
                aborted += [t.run_id for t in control.abort(run.session_id, why)]
    finally:
        control.close()
    if json_output:
        print_json({"action": "aborted", "version": version, "run_ids": aborted})
    elif aborted:
        print(f"Aborted {len(aborted)} run(s) of version {version}: {', '.join(aborted)}.")
    else:
        print(f"No live run of version {version} waits without a worker.")
    return 0


def report_control(
    json_output: bool, action: str, session: str, targets: list[Target], text: str
) -> int:
    """Which runs an interrupt or abort reached: the session's own (`run_id`, null when
    only sessions below it had one) and every one (`run_ids`)."""
    own = targets[0] if targets and targets[0].session_id == session else None
    if json_output:
        print_json(
            {
                "action": action,
                "session_id": session,
                "run_id": own.run_id if own else None,
                "workflow_id": own.workflow_id if own else None,
                "run_ids": [t.run_id for t in targets],
            }
        )
        return 0
    below = [t.run_id for t in targets if t is not own]
    parts = [f"run {own.run_id}"] if own else []
    if below:
        parts.append(f"{len(below)} run(s) below the session ({', '.join(below)})")
    print(text.format(runs=" and ".join(parts)))
    return 0


def register(app: typer.Typer) -> None:
    app.command("approve")(_answer(True))
    app.command("deny")(_answer(False))
    app.command("submit")(submit)
    app.command("interrupt")(interrupt)
    app.command("abort")(abort)
