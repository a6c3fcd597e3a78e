"""Whether the embedded PostgreSQL of a data folder runs, and stopping it.

The embedded server outlives the processes that start it (see `embedded_database_url`),
so something must be able to stop it: `helix-dbos db stop` and the test suite's teardown.
PostgreSQL writes its pid into `postmaster.pid`; SIGINT is its "fast shutdown" (active
connections are closed, nothing is lost).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def embedded_pid(data_dir: Path) -> int | None:
    """The pid of the PostgreSQL serving `data_dir`, or None when it does not run."""
    try:
        first = (data_dir / "postmaster.pid").read_text().splitlines()[0]
        pid = int(first.strip())
    except (OSError, IndexError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # alive, under another user (pgserver's, when run as root)
        return pid
    return pid


def stop_embedded(data_dir: Path, *, timeout: float = 30.0) -> int | None:
    """Stop the server of `data_dir` and wait until it is gone; its pid, or None if none ran."""
    pid = embedded_pid(data_dir)
    if pid is None:
        return None
    os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + timeout
    while embedded_pid(data_dir) == pid:
        if time.monotonic() > deadline:
            raise TimeoutError(f"PostgreSQL (pid {pid}) in {data_dir} did not stop in {timeout:g}s")
        time.sleep(0.05)
    return pid
