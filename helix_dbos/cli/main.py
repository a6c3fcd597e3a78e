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

from helix_dbos.cli import answers, database, doctor, fleet, reads, running
from helix_dbos.cli.common import EXIT_ERROR

app = typer.Typer(
    name="helix-dbos",
    help="Durable LLM agents on DBOS and PostgreSQL.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="markdown",
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
for group in (database, running, fleet, reads, answers, doctor):
    group.register(app)


def _command_name(args: Sequence[str]) -> str:
    """`db stop` for `helix-dbos db stop ...`, `runs` for `helix-dbos runs ...`."""
    words = [a for a in args if not a.startswith("-")][:2]
    if words[:1] == ["db"]:
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
