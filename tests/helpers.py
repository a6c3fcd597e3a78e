"""Small helpers shared by tests: plain SQL against the test database."""

from __future__ import annotations

from typing import Any

import psycopg

from helix_dbos.store.database import libpq_url


def sql(database_url: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    """Run one query (tests check rows with plain SQL, as users would)."""
    with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
        cur = conn.execute(query, params or None)
        return cur.fetchall() if cur.description else []
