"""How the CLI prints: rich tables sized to the terminal, plain JSON, spinners on stderr.

On a terminal a table fits its width: statuses, numbers and times are never cut; long
text wraps, names shrink with "…", the least useful columns (`Column.drop`) are left out,
and ids (short unique prefixes, see `ids`) are cut only if all that is not enough. Piped (`| grep`, a test) a table is never wrapped:
every column, one row per line, long cells cut with "…", no trailing spaces, no colours.
JSON is plain `json.dumps` with ISO 8601 times.
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

from rich.cells import cell_len
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
    """A table column: the row key, its header, and how it gives way on a narrow terminal.

    `wraps`: long text wraps; `shrinks`: long text is cut with "…" (names); `is_id`: an id,
    cut only when nothing else gives way (a companion's session id, its parent's with a
    suffix, can be long); none of them: never cut (statuses, numbers, times). `drop`: left
    out when the table does not fit otherwise, highest first (0: always shown)."""

    key: str
    header: str
    wraps: bool = False
    shrinks: bool = False
    is_id: bool = False
    drop: int = 0


# Between two columns of a table without a box: one space of padding on each side.
GAP = 2
# How narrow a column that gives way may get: wrapped text, names cut with "…", ids.
MIN_WRAP, MIN_SHRINK, MIN_ID = 12, 6, 12


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


def _floor(column: Column, size: int, *, cut_ids: bool) -> int:
    """The narrowest `column` may get (its header is never cut or wrapped)."""
    if column.wraps or column.shrinks:
        least = MIN_WRAP if column.wraps else MIN_SHRINK
    elif column.is_id and cut_ids:
        least = MIN_ID
    else:
        return size
    return min(size, max(least, cell_len(column.header)))


def fit_columns(
    columns: Sequence[Column], natural: Sequence[int], width: int
) -> list[tuple[Column, int]]:
    """The columns shown in `width` characters, each with its width.

    Columns with a `drop` go (highest first) while the table does not fit even with
    wrapped and shrunk columns at their narrowest; then those give way, widest first, and
    ids only if that is not enough. Statuses, numbers and times keep their width: if they
    alone do not fit, rich gets the table as it is."""
    shown = list(zip(columns, natural, strict=True))

    def total(sizes: Sequence[int]) -> int:
        return sum(sizes) + GAP * (len(sizes) - 1)

    def least(cut_ids: bool) -> list[int]:
        return [_floor(c, n, cut_ids=cut_ids) for c, n in shown]

    while total(least(False)) > width and any(c.drop for c, _ in shown):
        dropped = max((c for c, _ in shown), key=lambda c: c.drop)
        shown = [(c, n) for c, n in shown if c is not dropped]
    sizes = [n for _, n in shown]
    for cut_ids in (False, True):
        floors = least(cut_ids)
        while total(sizes) > width:
            give = [i for i, (s, f) in enumerate(zip(sizes, floors, strict=True)) if s > f]
            if not give:
                break
            sizes[max(give, key=lambda i: sizes[i])] -= 1
    return [(c, size) for (c, _), size in zip(shown, sizes, strict=True)]


def build_table(
    rows: Sequence[dict[str, Any]], columns: Sequence[Column], *, width: int, terminal: bool
) -> Table:
    """`width`: the most characters a cell holds; on a terminal the table fits the console."""
    texts = [[cell_text(row.get(c.key), width) for c in columns] for row in rows]
    natural = [
        max([cell_len(c.header), *(cell_len(t[i]) for t in texts)]) for i, c in enumerate(columns)
    ]
    if terminal:
        fitted = fit_columns(columns, natural, Console(highlight=False).width)
    else:
        fitted = [(c, n) for c, n in zip(columns, natural, strict=True)]
    index = {c.key: i for i, c in enumerate(columns)}
    table = Table(
        box=None, show_edge=False, pad_edge=False, header_style="bold" if terminal else ""
    )
    for column, size in fitted:
        numeric = bool(rows) and all(
            isinstance(row.get(column.key), (int, float))
            and not isinstance(row.get(column.key), bool)
            for row in rows
        )
        table.add_column(
            column.header,
            justify="right" if numeric else "left",
            width=size if terminal else None,
            no_wrap=not (terminal and column.wraps),
            overflow="fold" if column.wraps else "ellipsis",
        )
    for text in texts:
        # Text, not str: a cell such as "[call_1]" is data, not rich markup. Invisible
        # characters (bidi controls, zero-width...) show as highlighted escapes.
        table.add_row(*(highlight(text[index[c.key]]) for c, _ in fitted))
    return table


def print_table(
    rows: Sequence[dict[str, Any]], columns: Sequence[Column], *, width: int = 60
) -> None:
    """Aligned columns, numbers on the right; see the module docstring for the two modes."""
    terminal = sys.stdout.isatty()
    print_renderable(build_table(rows, columns, width=width, terminal=terminal))


def print_rows(
    rows: Sequence[dict[str, Any]], columns: Sequence[Column], *, json_output: bool, empty: str
) -> int:
    """A listing as JSON (`--json`), as a table, or `empty` when there is nothing; the
    command's exit code."""
    if json_output:
        print_json(rows)
    elif not rows:
        print(empty)
    else:
        print_table(rows, columns)
    return 0


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
