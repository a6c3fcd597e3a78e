"""How the CLI prints: rich tables sized to the terminal, plain JSON, spinners on stderr.

On a terminal a table fits its width (long text wraps, ids keep their line). Piped
(`| grep`, a test) a table is never wrapped: one row per line, long cells cut with "…",
no trailing spaces, no colours. JSON is plain `json.dumps` with ISO 8601 times.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from rich.console import Console, RenderableType
from rich.table import Table

from helix_dbos.cli.visible import escape_invisible, highlight

# Wide enough that a piped table is never wrapped.
_PIPE_WIDTH = 10_000


def stderr_console() -> Console:
    return Console(stderr=True, highlight=False)


def plural(count: int, noun: str) -> str:
    """`1 agent`, `2 agents`."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def article(word: str) -> str:
    """`a HelixDBOS`, `an Agent`."""
    return ("an " if word[:1].lower() in "aeiou" else "a ") + word


def json_default(value: Any) -> Any:
    """ISO 8601 for times; pydantic models as their JSON form; anything else as text."""
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    return str(value)


def print_json(data: Any) -> None:
    print(json.dumps(data, default=json_default, indent=2))


@dataclass(frozen=True)
class Column:
    """A table column: the row key, its header, and whether its text may wrap on a terminal."""

    key: str
    header: str
    wraps: bool = False


def cell_text(value: Any, width: int) -> str:
    """One line of text for a cell: local times, JSON for structures, cut at `width`."""
    if value is None:
        text = ""
    elif isinstance(value, dt.datetime):
        text = value.astimezone().strftime("%Y-%m-%d %H:%M:%S")
    elif isinstance(value, (dict, list)):
        text = json.dumps(value, default=json_default)
    else:
        text = str(value)
    text = " ".join(escape_invisible(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def build_table(
    rows: Sequence[dict[str, Any]], columns: Sequence[Column], *, width: int, terminal: bool
) -> Table:
    table = Table(
        box=None, show_edge=False, pad_edge=False, header_style="bold" if terminal else ""
    )
    for column in columns:
        numeric = bool(rows) and all(
            isinstance(row.get(column.key), (int, float))
            and not isinstance(row.get(column.key), bool)
            for row in rows
        )
        table.add_column(
            column.header,
            justify="right" if numeric else "left",
            no_wrap=not (terminal and column.wraps),
            overflow="fold" if column.wraps else "ellipsis",
        )
    for row in rows:
        # Text, not str: a cell such as "[call_1]" is data, not rich markup.
        # Invisible characters (bidi controls, zero-width...) show as highlighted escapes.
        table.add_row(*(highlight(cell_text(row.get(c.key), width)) for c in columns))
    return table


def print_table(
    rows: Sequence[dict[str, Any]], columns: Sequence[Column], *, width: int = 60
) -> None:
    """Aligned columns, numbers on the right; see the module docstring for the two modes."""
    terminal = sys.stdout.isatty()
    print_renderable(build_table(rows, columns, width=width, terminal=terminal))


def print_renderable(renderable: RenderableType) -> None:
    """On a terminal, fitted to its width; piped, unwrapped and without trailing spaces."""
    if sys.stdout.isatty():
        Console(highlight=False).print(renderable)
        return
    buffer = io.StringIO()
    Console(file=buffer, width=_PIPE_WIDTH, color_system=None, highlight=False).print(renderable)
    for line in buffer.getvalue().splitlines():
        print(line.rstrip())


@contextmanager
def spinner(message: str) -> Iterator[None]:
    """A spinner on stderr while something slow happens (nothing when stderr is piped)."""
    console = stderr_console()
    if not console.is_terminal:
        yield
        return
    with console.status(message):
        yield
