"""A PostgreSQL cluster of a test's own, to restart, crash and stop at will.

Fault tests must never touch a server anyone else uses. This one lives in the test's
temporary folder, listens on a free port of 127.0.0.1 (so its URL survives restarts),
and is driven with pgserver's own `initdb`/`pg_ctl` (run as pgserver's system user when
the tests run as root, as pgserver itself does).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from pathlib import Path

import psycopg
from live_server import free_port

_USER = "pgserver"


def _bin(name: str) -> str:
    from pgserver._commands import POSTGRES_BIN_PATH  # noqa: PLC0415 - optional extra

    return str(POSTGRES_BIN_PATH / name)


class Cluster:
    """initdb'd in `folder`, started with `start()`; `url` names its `postgres` database."""

    def __init__(self, folder: Path, max_connections: int = 100) -> None:
        self.data = folder / "data"
        self.log = folder / "server.log"
        self.port = free_port()  # below the ephemeral range: it survives restarts
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._as_root = os.geteuid() == 0
        folder.mkdir(parents=True, exist_ok=True)
        if self._as_root:
            from pgserver.utils import ensure_prefix_permissions, ensure_user_exists  # noqa: PLC0415

            ensure_user_exists(_USER)
            ensure_prefix_permissions(folder)
            folder.chmod(0o777)
        self.data.mkdir()
        self.log.touch()
        if self._as_root:
            import pwd  # noqa: PLC0415

            entry = pwd.getpwnam(_USER)
            os.chown(self.data, entry.pw_uid, entry.pw_gid)
            os.chown(self.log, entry.pw_uid, entry.pw_gid)
        self._run(
            _bin("initdb"),
            "-D",
            str(self.data),
            "--auth=trust",
            "--encoding=utf8",
            "-U",
            "postgres",
        )
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"\nlisten_addresses = '127.0.0.1'\nport = {self.port}\n"
                f"unix_socket_directories = ''\nmax_connections = {max_connections}\nfsync = off\n"
            )

    def _run(self, *argv: str, timeout: float = 60) -> None:
        command = list(argv)
        if self._as_root:
            command = ["su", _USER, "-s", "/bin/sh", "-c", " ".join(f"'{a}'" for a in argv)]
        subprocess.run(command, check=True, timeout=timeout, capture_output=True)

    def _ctl(self, *args: str) -> None:
        self._run(_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.log), *args)

    def start(self) -> None:
        self._ctl("-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._ctl("-w", "-m", mode, "stop")

    def restart(self) -> None:
        """`pg_ctl restart -m fast`: every connection is closed, then the server is back."""
        self._ctl("-w", "-m", "fast", "restart")

    def crash_restart(self, down_seconds: float = 0.0) -> None:
        """`pg_ctl stop -m immediate` (as a crash: no checkpoint), `down_seconds` with no
        server, and start (crash recovery)."""
        self.stop("immediate")
        time.sleep(down_seconds)
        self.start()

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg.connect(self.url, connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):  # not running
            self.stop("immediate")
