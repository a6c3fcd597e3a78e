"""Short ids: tables show a session or run id as its shortest unique prefix (at least
`MIN_PREFIX` characters, `ses_` and 8 hex digits for helix's own ids), and every command
that takes an id accepts such a prefix back, as git does with commits.

A prefix is unique over the whole table when it is printed; if a later id shares it, the
command says the prefix is ambiguous and lists the candidates instead of guessing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

MIN_PREFIX = 12  # "ses_" or "run_" and 8 hex digits: 4 billion ids before a clash is likely
Kind = Literal["session", "run"]


class AmbiguousIdError(LookupError):
    """A prefix that starts several ids (main() prints it as one line, exit code 2)."""


@dataclass(frozen=True)
class _Table:
    table: str
    column: str


_TABLES: dict[Kind, _Table] = {
    "session": _Table("helix.sessions", "session_id"),
    "run": _Table("helix.runs", "run_id"),
}


def shorten(conn: Any, kind: Kind, ids: Iterable[str | None]) -> dict[str, str]:
    """Each id -> its shortest prefix (of `MIN_PREFIX` or more) no other id of `kind` has;
    an id barely longer than its prefix is shown whole."""
    where = _TABLES[kind]
    pending = {i for i in ids if i}
    short: dict[str, str] = {}
    length = MIN_PREFIX
    while pending:
        prefixes = {i: i[:length] for i in pending}
        rows = conn.execute(
            f"SELECT left({where.column}, %(n)s) AS p, count(*) FROM {where.table} "
            f"WHERE left({where.column}, %(n)s) = ANY(%(ps)s) GROUP BY 1",
            {"n": length, "ps": sorted(set(prefixes.values()))},
        ).fetchall()
        clashes = {p for p, count in rows if count > 1}
        for full, prefix in prefixes.items():
            if prefix not in clashes or len(full) <= length:
                short[full] = full if len(full) <= length + 1 else prefix
        pending = {i for i in pending if i not in short}
        length += 4
    return short


def resolve(conn: Any, kind: Kind, given: str) -> str:
    """The full id `given` names: itself when it exists (or when nothing starts with it,
    so the caller's "does not exist" error names it), else the one id it is a prefix of."""
    where = _TABLES[kind]
    found = conn.execute(
        f"(SELECT {where.column} FROM {where.table} WHERE {where.column} = %(id)s) "
        f"UNION ALL (SELECT {where.column} FROM {where.table} "
        f"WHERE starts_with({where.column}, %(id)s) ORDER BY 1 LIMIT 4)",
        {"id": given},
    ).fetchall()
    ids = [row[0] for row in found]
    if not ids or given in ids:
        return given
    if len(ids) == 1:
        return str(ids[0])
    listed = ", ".join(ids[:3]) + (" and more" if len(ids) > 3 else "")
    raise AmbiguousIdError(
        f"{kind} id prefix {given!r} is ambiguous ({listed} start with it): give more characters"
    )
