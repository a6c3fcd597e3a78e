"""One re-check a minute for every message waiter of the process, not one per waiter.

A run waiting for a human parks in DBOS's `recv`, woken by the notification of its
message (LISTEN/NOTIFY). Against a dropped notification, DBOS has each waiter re-check
the database on its own timer, once a minute: with 10,000 runs waiting, 167 wake-ups
and queries a second, a sixth of a core for nothing. Here one thread re-checks every
waiter at once, in one query per thousand, at the same interval (so a message whose
notification was lost waits as long as before, a minute at most), and each waiter's
own timer is pushed back to a day, a last resort should this thread ever stop.
"""

from __future__ import annotations

import logging
import threading

from helix_dbos.runtime.dbos import dbos_internals

logger = logging.getLogger(__name__)

# Each waiter's own re-check while this thread runs: a backstop, nearly never due.
WAITER_RECHECK_SECONDS = 24 * 3600.0


class MessageRecheck:
    """The process's shared re-check of waiting `recv`s (and `get_event`s)."""

    def __init__(self, interval_seconds: float | None = None) -> None:
        self.interval_seconds = interval_seconds  # None: DBOS's own, read at start()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.sweeps = 0  # done so far (for tests and benchmarks)

    def start(self) -> None:
        if self._thread is not None:
            return
        if self.interval_seconds is None:
            self.interval_seconds = dbos_internals.waiter_recheck_seconds()
        dbos_internals.set_waiter_recheck_seconds(WAITER_RECHECK_SECONDS)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="helix-message-recheck", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread; waits that start afterwards re-check on their own again."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=10)
        self._thread = None
        dbos_internals.set_waiter_recheck_seconds(None)

    def sweep(self) -> int:
        """Wake every waiter whose message is in the database; how many were woken."""
        self.sweeps += 1
        if not dbos_internals.listener_running():
            return 0  # without a listener, DBOS polls each waiter every second anyway
        return dbos_internals.wake_message_waiters()

    def _run(self) -> None:
        assert self.interval_seconds is not None
        while not self._stop.wait(self.interval_seconds):
            try:
                woken = self.sweep()
            except Exception:  # the database away: the next sweep tries again
                logger.warning("helix's re-check of message waiters failed", exc_info=True)
                continue
            if woken:
                logger.info("helix's re-check woke %d message waiter(s)", woken)
