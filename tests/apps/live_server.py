"""Real servers on 127.0.0.1 (free port) for HTTP, browser and crash tests: `serve` runs an
app in a background thread; `ServerProcess` runs one as a subprocess that can be SIGKILLed."""

from __future__ import annotations

import functools
import os
import random
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import forkserver
import httpx
import uvicorn


@contextmanager
def serve(app, *, timeout: float = 20.0) -> Iterator[str]:
    """Serve `app` (its lifespan included) and yield its base URL; stop it afterwards."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


# A port picked now and bound later (a server started, or started again after a kill, on the
# same port) comes from below the kernel's ephemeral range (32768-60999 on Linux). A port
# from bind(0) is in that range, where any outgoing connection on the machine may take it
# as its source port before the server binds it: "address already in use" (CI and a local
# run of test_remote_subagents). A generator of its own: Hypothesis seeds `random`.
_PORTS = range(20_000, 32_000)
_pick = random.SystemRandom()
# Nothing holds a port between its pick and its server's bind, so two picks could meet:
# the parent and child servers of one remote sub-agent test got the same port once (CI),
# the parent could not bind it, and the child answered the parent's readiness check and
# its requests ("Agent 'lead_limited' is not registered ... (registered: worker)"). So a
# pytest worker picks in a slice of the range of its own (gw0, gw1, ...), and never hands
# out a port twice while the slice has others.
_SLICES = 6
_handed_out: set[int] = set()


def _my_ports() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) % _SLICES if worker.isdigit() else 0
    size = len(_PORTS) // _SLICES
    return range(_PORTS.start + index * size, _PORTS.start + (index + 1) * size)


def free_port() -> int:
    ports = _my_ports()
    if len(_handed_out) > len(ports) // 2:
        _handed_out.clear()  # a long session: old servers are gone
    for _ in range(200):
        port = _pick.choice(ports)
        if port in _handed_out:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # taken (or in TIME_WAIT): another
            _handed_out.add(port)
            return port
    raise RuntimeError(f"no free port in {ports}")


@functools.cache
def _probe() -> httpx.Client:
    """One client for every readiness check of this process, with no kept connection (a
    server killed and relaunched on its port leaves none stale). A client made per check,
    as `httpx.get` does, read the CA bundle each time: about 30 ms of CPU a poll, seconds
    a server start, the largest single cost in a pytest worker's own CPU."""
    return httpx.Client(timeout=2, limits=httpx.Limits(max_keepalive_connections=0))


def answers(url: str, headers: Mapping[str, str] | None = None) -> Callable[[], bool]:
    """A readiness check: GET `url` answers 200."""
    return lambda: _probe().get(url, headers=headers).status_code == 200


class ServerProcess:
    """A server subprocess on a port of its own, its output appended to `log`. `launch`
    again after `kill()` relaunches it on the same port (and, with the same argv, the same
    database and executor id, so DBOS recovers its runs)."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def launch(self, argv: Sequence[str], ready: Callable[[], object], timeout: float = 90) -> None:
        """Start `argv` and return once `ready()` is true; fail if the process dies first
        (with its log) or `timeout` passes (with the check's last error)."""
        with open(self.log, "ab") as log:
            self.proc = forkserver.Popen(list(argv), stdout=log, stderr=log)
        deadline = time.monotonic() + timeout
        error: Exception | None = None
        while True:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                if ready():
                    return
            except Exception as exc:  # not up yet: refused, reset, 5xx...
                error = exc
            assert time.monotonic() < deadline, f"the server did not start: {error!r}"
            time.sleep(0.2)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
