"""A TCP proxy in front of PostgreSQL whose connections a test can cut, to give one
worker a database outage while the others keep theirs."""

from __future__ import annotations

import contextlib
import socket
import threading
from urllib.parse import quote

from psycopg.conninfo import conninfo_to_dict

from helix_dbos.store.database import libpq_url


class CuttableProxy:
    """Forwards 127.0.0.1:<port> to the server of `database_url` (TCP or Unix socket)
    until `cut()`, which closes every connection and refuses new ones until `restore()`."""

    def __init__(self, database_url: str) -> None:
        info = conninfo_to_dict(libpq_url(database_url))
        host = str(info.get("host") or "/tmp")
        port = int(info.get("port") or 5432)
        self._target: tuple[int, str | tuple[str, int]] = (
            (socket.AF_UNIX, f"{host}/.s.PGSQL.{port}")
            if host.startswith("/")
            else (socket.AF_INET, (host, port))
        )
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        user = quote(str(info.get("user") or "postgres"))
        password = f":{quote(str(info['password']))}" if info.get("password") else ""
        self.url = f"postgresql://{user}{password}@127.0.0.1:{self.port}/{info['dbname']}"
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._cut = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if self._cut:
                    client.close()
                    continue
            family, address = self._target
            upstream = socket.socket(family, socket.SOCK_STREAM)
            upstream.connect(address)
            with self._lock:
                if self._cut:
                    client.close()
                    upstream.close()
                    continue
                self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def cut(self) -> None:
        """Drop every connection and refuse new ones: the database is gone for the
        proxy's users."""
        with self._lock:
            self._cut = True
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._sockets = []

    def restore(self) -> None:
        """Forward new connections again: the database is back for the proxy's users."""
        with self._lock:
            self._cut = False

    def close(self) -> None:
        self.cut()
        self._listener.close()
