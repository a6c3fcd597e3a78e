"""The statements every run and every step executes, sent straight to psycopg.

SQLAlchemy's `AsyncConnection.execute` spends about 80 µs of Python on each statement
(a greenlet hop, bind processing, a result wrapper): as much as the round trip of a
short query. `DriverConnection` runs the same `text()` clauses, compiled once to psycopg's
placeholders, on a psycopg connection of `store.statement_pool`, and raises the errors
SQLAlchemy would, so callers tell a lost connection from a refused statement the same way.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
from sqlalchemy import TextClause
from sqlalchemy.dialects.postgresql.psycopg import PGDialectAsync_psycopg
from sqlalchemy.exc import DBAPIError, MultipleResultsFound, NoResultFound, ResourceClosedError

_DIALECT = PGDialectAsync_psycopg()  # type: ignore[no-untyped-call]
_compiled: dict[int, tuple[TextClause, str]] = {}


def compiled(clause: TextClause) -> str:
    """The clause in psycopg's `%(name)s` form (statements are built once, see `_sql`)."""
    hit = _compiled.get(id(clause))
    if hit is None or hit[0] is not clause:
        if len(_compiled) >= 1024:  # bounded like `_sql`'s cache of the clauses
            _compiled.clear()
        hit = (clause, str(clause.compile(dialect=_DIALECT)))
        _compiled[id(clause)] = hit
    return hit[1]


class DriverResult:
    """A statement's rows (plain tuples), with the `Result` methods helix reads them by."""

    def __init__(self, rows: list[tuple[Any, ...]] | None) -> None:
        self._rows = rows

    def _all(self) -> list[tuple[Any, ...]]:
        if self._rows is None:
            raise ResourceClosedError("This result object does not return rows.")
        return self._rows

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self._all())

    def all(self) -> list[tuple[Any, ...]]:
        return list(self._all())

    def first(self) -> tuple[Any, ...] | None:
        rows = self._all()
        return rows[0] if rows else None

    def one(self) -> tuple[Any, ...]:
        rows = self._all()
        if not rows:
            raise NoResultFound("No row was found when one was required")
        if len(rows) > 1:
            raise MultipleResultsFound("Multiple rows were found when exactly one was required")
        return rows[0]

    def scalar(self) -> Any:
        row = self.first()
        return None if row is None else row[0]

    def scalar_one(self) -> Any:
        return self.one()[0]


class DriverConnection:
    """`repository.SQLConnection` over a psycopg connection (autocommit: each statement
    commits alone). A lost connection is flagged `connection_invalidated`; its pool
    replaces it when it comes back."""

    def __init__(self, raw: psycopg.AsyncConnection[Any]) -> None:
        self._raw = raw

    async def execute(self, statement: Any, parameters: Any = None) -> DriverResult:
        sql = compiled(statement)
        try:
            async with self._raw.cursor() as cursor:
                await cursor.execute(sql, parameters)
                rows = await cursor.fetchall() if cursor.description is not None else None
        except psycopg.Error as exc:
            lost = self._raw.broken or self._raw.closed  # a timeout or a deadlock is not
            raise DBAPIError.instance(
                sql, parameters, exc, psycopg.Error, connection_invalidated=lost
            ) from exc
        return DriverResult(rows)

    async def discard(self) -> None:
        """Close the connection, so its pool opens another instead of handing it out
        again (one that may still hold a session-level lock, say)."""
        await self._raw.close()
