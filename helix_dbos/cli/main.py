"""The `helix-dbos` application: the command groups assembled, and main()'s error contract.

main() runs click without its standalone mode so that every failure is one line on
stderr, `helix-dbos <command>: error: <message>`, with exit code 2 (usage errors as much
as a session that does not exist); HELIX_DEBUG=1 shows the traceback instead.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import typer

from helix_dbos.cli import (
    answers,
    checkpoints,
    database,
    doctor,
    fleet,
    queue,
    reads,
    running,
    schedules,
)
from helix_dbos.cli.common import EXIT_ERROR

app = typer.Typer(
    name="helix-dbos",
    help="Durable LLM agents on DBOS and PostgreSQL.",
    no_args_is_help=True,
    add_completion=False,
    # click's plain help: flags without a `<bool>` metavar, choices on one line, and no
    # rich help renderer to import (`--help` answers in a fraction of a second).
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
# schedules first: its group lists before `db`, the last line of --help
for group in (schedules, database, running, fleet, reads, checkpoints, answers, queue, doctor):
    group.register(app)

# The order `helix-dbos --help` lists the commands in, with the line it shows for each:
# running an agent and reading what it did first, answering it, a fleet, then setup.
COMMANDS: dict[str, str] = {
    "demo": "Run the quickstart agent and show what it did.",
    "runs": "List runs; --status waiting shows what each waits on.",
    "transcript": "Print a session's messages in order.",
    "usage": "Calls, tokens and cost by model, session, agent or root.",
    "checkpoints": "List a session's checkpoints, one per committed step.",
    "fork": "Create a new session from a checkpoint.",
    "prune": "Remove old checkpoints, chunks and workflow records.",
    "resume": "Continue a session in a new run and wait for it.",
    "approve": "Approve a tool call that waits for approval.",
    "deny": "Deny a tool call that waits for approval.",
    "submit": "Hand in a client tool's result or its error.",
    "interrupt": "Stop a session's run at its next step boundary.",
    "abort": "Cancel a session's live run now.",
    "queue": "List a session's queued messages; --cancel one.",
    "serve": "Serve the HTTP API, the SSE stream and the inbox.",
    "worker": "Run a worker that executes queued runs.",
    "workers": "List workers and the runs no worker serves.",
    "recover": "Hand a dead worker's runs back to the queues now.",
    "doctor": "Check what helix needs and say what to fix.",
    "migrate": "Create the database and apply pending migrations.",
    "db-url": "Print the URL of the database in use.",
}


def _arrange(typer_app: typer.Typer) -> None:
    """Commands in `COMMANDS` order (any other after them), each with its short line."""
    found = {info.name: info for info in typer_app.registered_commands}
    ordered = [found.pop(name) for name in COMMANDS if name in found] + list(found.values())
    for info in ordered:
        info.short_help = info.short_help or COMMANDS.get(info.name or "")
    typer_app.registered_commands[:] = ordered


_arrange(app)


def _command_name(args: Sequence[str]) -> str:
    """`db stop` for `helix-dbos db stop ...`, `runs` for `helix-dbos runs ...`."""
    words = [a for a in args if not a.startswith("-")][:2]
    if words[:1] in (["db"], ["schedules"]):
        return " ".join(words)
    return words[0] if words else ""


def _one_line(message: str) -> str:
    return " ".join(message.split())


def _usage_message(exc: Exception) -> str:
    """The usage error's message, naming the option at fault by its flag (`--app`)."""
    message = str(getattr(exc, "message", "") or exc)
    param = getattr(exc, "param", None)
    names = getattr(param, "opts", []) or []
    if getattr(param, "param_type_name", "") == "argument":
        names = [getattr(param, "human_readable_name", "") or names[0]]
    flags = " / ".join(f"'{name}'" for name in names)
    if type(exc).__name__ == "MissingParameter" and flags:
        return f"Missing {getattr(param, 'param_type_name', 'option')} {flags}"
    if flags:
        return f"Invalid value for {flags}: {message}"
    return message


def _is_usage_error(exc: Exception) -> bool:
    """click's (or typer's vendored click's) UsageError family, whichever typer is installed."""
    return any(cls.__name__ == "UsageError" for cls in type(exc).__mro__)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command = typer.main.get_command(app)
    name = _command_name(args)
    prefix = f"helix-dbos {name}".rstrip()
    try:
        result = command.main(args=args, prog_name="helix-dbos", standalone_mode=False)
    except (KeyboardInterrupt, typer.Abort):
        return 130
    except BrokenPipeError:  # `helix-dbos runs | head`: the reader left, which is fine
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `helix-dbos`: the help
            ctx = getattr(exc, "ctx", None)
            print(ctx.get_help() if ctx is not None else "", file=sys.stderr)
            return EXIT_ERROR
        if _is_usage_error(exc):  # a missing option, a bad value
            print(f"{prefix}: error: {_one_line(_usage_message(exc))}", file=sys.stderr)
            return EXIT_ERROR
        if os.environ.get("HELIX_DEBUG"):
            raise
        print(f"{prefix}: error: {_one_line(str(exc)) or type(exc).__name__}", file=sys.stderr)
        return EXIT_ERROR
    return result if isinstance(result, int) else 0
