"""A PgBouncer of a test's own, in transaction mode, in front of a PostgreSQL server.

Debian's `pgbouncer` package (CI installs it, `.ci/run`). It listens on a free port of
127.0.0.1, trusts every login (auth_type=trust), and hands each transaction a server
connection of its pool, as the poolers of managed PostgreSQL do. Started in the
foreground as a subprocess (as an unprivileged user when the tests run as root:
PgBouncer refuses to run as root) and stopped by its pid.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import psycopg
import pytest
from live_server import free_port
from psycopg.conninfo import conninfo_to_dict

from helix_dbos.store.database import libpq_url

_USER = "pgserver"  # the tests' unprivileged user (tests/pg_cluster.py makes it too)


def pgbouncer_binary() -> str:
    """The binary, or a skip when it is absent here; in CI (CI=true) its absence fails."""
    found = shutil.which("pgbouncer") or (
        "/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None
    )
    if found is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("pgbouncer is not installed: .ci/run installs Debian's package")
        pytest.skip("pgbouncer is not installed (apt-get install pgbouncer)")
    return found


class PgBouncer:
    """Transaction pooling on 127.0.0.1:`port` for every database of `server_url`'s server."""

    def __init__(self, folder: Path, server_url: str, default_pool_size: int = 20) -> None:
        binary = pgbouncer_binary()
        server = conninfo_to_dict(libpq_url(server_url))
        host = str(server.get("host") or "127.0.0.1")
        self.server_port = int(server.get("port") or 5432)
        self.port = free_port()  # below the ephemeral range: it survives restarts
        user = str(server.get("user") or "postgres")
        folder.mkdir(parents=True, exist_ok=True)
        as_root = os.geteuid() == 0
        if as_root:  # PgBouncer runs as `_USER`: it must reach its folder
            from pgserver.utils import ensure_prefix_permissions, ensure_user_exists  # noqa: PLC0415

            ensure_user_exists(_USER)
            ensure_prefix_permissions(folder)
            folder.chmod(0o777)
        self.log = folder / "pgbouncer.log"
        config = folder / "pgbouncer.ini"
        config.write_text(
            "[databases]\n"
            f"* = host={host} port={self.server_port}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {folder / 'users.txt'}\n"
            f"admin_users = {user}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {default_pool_size}\n"
            "max_client_conn = 500\n"
            "server_reset_query =\n"
            "ignore_startup_parameters = extra_float_digits\n"
            f"logfile = {self.log}\n"
        )
        (folder / "users.txt").write_text(f'"{user}" ""\n')
        command = [binary, str(config)]
        if as_root:
            command[1:1] = ["-u", _USER]
        self._stderr = open(folder / "stderr.log", "w")  # noqa: SIM115
        self.proc = subprocess.Popen(command, stdout=self._stderr, stderr=subprocess.STDOUT)
        self._user = user
        self._wait_ready()

    def url(self, server_url: str) -> str:
        """`server_url`'s database, through the pooler."""
        params = conninfo_to_dict(libpq_url(server_url))
        params.update(host="127.0.0.1", port=str(self.port))
        dbname = params.get("dbname", "postgres")
        user = params.get("user", "postgres")
        return f"postgresql://{user}@127.0.0.1:{self.port}/{dbname}"

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 15
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pgbouncer exited: {self.log.read_text()[-2000:]}")
            try:
                psycopg.connect(
                    f"postgresql://{self._user}@127.0.0.1:{self.port}/pgbouncer",
                    autocommit=True,
                    connect_timeout=2,
                ).close()
                return
            except psycopg.Error:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._stderr.close()
