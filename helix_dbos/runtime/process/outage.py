"""A database that went away, waited out inside a run.

A restart, a failover or a network cut is not a failed run: a statement that lost its
connection is run again once the database answers (every helix write is keyed or
guarded, so one that did land is a no-op the second time), with backoff, for up to
`HelixDBOS(database_outage_seconds=...)`. Past that horizon the run's workflow stops
where it is, recording nothing (`DatabaseUnavailable`), so it stays PENDING and
recovery resumes it; it never ends `failed` for it. Only a run's model, its tools or
the user's own code can fail it.

Outside a workflow (an HTTP read, the CLI) nothing waits: the caller gets the error.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import psycopg
from dbos import DBOS
from dbos import error as dbos_errors
from psycopg_pool import PoolClosed, PoolTimeout
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as SATimeoutError

from helix_dbos.store.statement_pool import CHECKOUT_TIMEOUT_SECONDS

T = TypeVar("T")
logger = logging.getLogger("helix_dbos")

DEFAULT_OUTAGE_SECONDS = 900.0
FIRST_DELAY_SECONDS = 0.1
MAX_DELAY_SECONDS = 2.0
REPORT_EVERY_SECONDS = 10.0
CHECKOUT_SECONDS = CHECKOUT_TIMEOUT_SECONDS  # a pooled connection's wait, at most


_TRANSIENT_MARKERS = (
    "QueuePool limit",
    "couldn't get a connection",  # psycopg_pool.PoolTimeout
    "connection timed out",
    "server closed the connection",
    "terminating connection",
    "connection is closed",
    "could not connect",
    "Connection refused",
    "too many clients",  # max_connections taken (SQLSTATE 53300): wait for a free one
    "remaining connection slots are reserved",
)


def is_transient_db_error(exc: BaseException) -> bool:
    """A lost connection or an exhausted pool: worth retrying, not failing a durable run.

    Judged by type and by message, since an error replayed from a checkpoint may
    come back as a plainer exception type.
    """
    lost = (SATimeoutError, PoolTimeout, PoolClosed, OperationalError, InterfaceError)
    if isinstance(exc, lost):  # PoolClosed: a retired pool (`store.statement_pool`)
        return True
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    if isinstance(exc, psycopg.errors.TooManyConnections):
        return True
    text_ = str(exc)
    return any(marker in text_ for marker in _TRANSIENT_MARKERS)


class DatabaseUnavailable(dbos_errors.DBOSWorkflowCancelledError):
    """The database stayed unreachable past the horizon. A `BaseException` (as DBOS's own
    cancellation): no `except Exception` of helix's or the user's takes it for a failure,
    DBOS records no step output for it, and the workflow stops unrecorded (PENDING)."""


class ProcessShutDown(dbos_errors.DBOSWorkflowCancelledError):
    """Workflow code that needed the database after helix was shut down in its process: a
    `BaseException` like `DatabaseUnavailable`, so the workflow stops unrecorded (PENDING)
    and recovery finishes it, as after a crash at that point."""


class OutageWait:
    """Runs a database operation until it gets through or the horizon passes."""

    def __init__(
        self,
        horizon_seconds: float = DEFAULT_OUTAGE_SECONDS,
        checkout_seconds: float = CHECKOUT_SECONDS,
    ) -> None:
        if not horizon_seconds > 0:
            raise ValueError("database_outage_seconds must be positive")
        if not checkout_seconds > 0:
            raise ValueError("connection_timeout_seconds must be positive")
        self.horizon_seconds = horizon_seconds
        # A pooled connection's wait: the whole wait outside a run, one attempt's inside.
        self.checkout_seconds = checkout_seconds

    async def run(self, what: str, operation: Callable[[float], Awaitable[T]]) -> T:
        """`operation(wait)`, again after each lost connection or exhausted pool, inside a
        workflow (a step included); once outside one. `wait` is how long the operation
        may wait for a pooled connection: never past the horizon."""
        if DBOS.workflow_id is None:
            return await operation(self.checkout_seconds)
        started: float | None = None
        reported = 0.0
        delay = FIRST_DELAY_SECONDS
        while True:
            attempt = time.monotonic()
            waited = 0.0 if started is None else attempt - started
            try:
                result = await operation(
                    max(0.1, min(self.checkout_seconds, self.horizon_seconds - waited))
                )
            except Exception as exc:
                if not is_transient_db_error(exc):
                    raise
                now = time.monotonic()
                started = attempt if started is None else started
                waited = now - started
                if waited >= self.horizon_seconds:
                    logger.error(
                        "helix gave up waiting for the database (%s, workflow %s) after %.1fs: "
                        "the run stays pending, for recovery to resume: %s",
                        what,
                        DBOS.workflow_id,
                        waited,
                        exc,
                    )
                    raise DatabaseUnavailable(
                        f"database unavailable for {waited:.0f}s ({what}): {exc}"
                    ) from exc
                if not reported or waited - reported >= REPORT_EVERY_SECONDS:
                    reported = max(waited, 1e-9)
                    logger.warning(
                        "helix is waiting for the database (%s, workflow %s; %.1fs so far, "
                        "up to %gs): %s",
                        what,
                        DBOS.workflow_id,
                        waited,
                        self.horizon_seconds,
                        exc,
                    )
                await asyncio.sleep(delay * random.uniform(0.5, 1.5))
                delay = min(delay * 2, MAX_DELAY_SECONDS)
                continue
            if started is not None:
                logger.warning(
                    "helix reached the database again (%s, workflow %s) after waiting %.1fs",
                    what,
                    DBOS.workflow_id,
                    time.monotonic() - started,
                )
            return result
