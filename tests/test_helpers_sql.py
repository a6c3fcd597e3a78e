"""`helpers.sql` keeps its connections (tests/helpers.py): it reuses one across calls,
never lends one to two calls at once, and replaces one the server ended."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from helpers import sql

from helix_dbos.store.database import libpq_url

pytestmark = pytest.mark.database


def test_calls_reuse_a_connection_and_one_the_server_ended_is_replaced(database_url):
    first = sql(database_url, "SELECT pg_backend_pid()")
    assert sql(database_url, "SELECT pg_backend_pid()") == first, "a connection per call"

    # Ended from another connection, as a restart or a dropped database would end it.
    with psycopg.connect(libpq_url(database_url), autocommit=True) as other:
        assert other.execute("SELECT pg_terminate_backend(%s)", first[0]).fetchone() == (True,)

    again = sql(database_url, "SELECT pg_backend_pid(), 41 + 1")
    assert again[0][1] == 42
    assert again[0][0] != first[0][0], "the ended backend's connection came back"


def test_a_call_that_blocks_holds_up_no_other_call(database_url):
    """Two threads at once get two connections: one sleeping query does not make the
    other's wait behind it."""
    started = threading.Event()
    result: list[object] = []

    def sleeper() -> None:
        started.set()
        result.extend(sql(database_url, "SELECT pg_sleep(3), pg_backend_pid()"))

    thread = threading.Thread(target=sleeper)
    thread.start()
    started.wait(5)
    sleeping = []
    for _ in range(100):  # until the sleeper's query is running
        sleeping = sql(
            database_url,
            "SELECT pid FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND datname = "
            "current_database() AND pid <> pg_backend_pid()",
        )
        if sleeping:
            break
        time.sleep(0.05)
    assert sleeping, "the sleeper's query never ran"
    assert thread.is_alive(), "the other call waited for the sleeper"
    thread.join(10)
    assert result and result[0][1] == sleeping[0][0]


def test_an_error_leaves_the_connection_usable_and_a_begun_transaction_is_not_kept(
    database_url,
):
    with pytest.raises(psycopg.errors.DivisionByZero):
        sql(database_url, "SELECT 1 / 0")
    assert sql(database_url, "SELECT 2") == [(2,)]

    before = sql(database_url, "SELECT pg_backend_pid()")
    sql(database_url, "BEGIN; SELECT 1")  # left in a transaction: closed, not kept
    assert sql(database_url, "SELECT now() = statement_timestamp()") == [(True,)]
    assert sql(database_url, "SELECT pg_backend_pid()") != before
