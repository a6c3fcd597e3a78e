"""Small helpers shared by tests: plain SQL against the test database."""

from __future__ import annotations

import os
from typing import Any, NoReturn

import psycopg
import pytest

from helix_dbos.store.database import libpq_url


def sql(database_url: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    """Run one query (tests check rows with plain SQL, as users would)."""
    with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
        cur = conn.execute(query, params or None)
        return cur.fetchall() if cur.description else []


def skip_or_fail_in_ci(reason: str) -> NoReturn:
    """Skip a test whose tool is missing here, but fail it in CI (CI=true), where a missing
    tool means the CI script no longer installs it and the test would silently stop running."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI is missing what this test needs: {reason}")
    pytest.skip(reason)
