"""Python subprocesses for the tests, forked from a process that has already imported
helix_dbos and its dependencies.

Most of the suite's CPU went to the ~400 Python processes the tests start (crash apps,
servers, the CLI, the examples), and most of theirs to imports: 1.2 s of CPU each before a
line of the app runs (`docs/internals.md`). `Popen` here is `subprocess.Popen` with one
difference: a command that runs this interpreter on a script (`python app.py ...`) or a
module (`python -m helix_dbos.cli ...`) is forked from this worker's fork server, which
imported everything once, instead of exec'ing a new interpreter. The child is still a real
process with its own pid, arguments, environment, working directory and standard streams:
tests SIGKILL it, read its output and wait for its exit status exactly as before. Anything
else (another program, `-c`, interpreter options, another PYTHONPATH or PYTHON* setting
than the server's) falls back to exec, as does everything when
HELIX_TEST_FORKSERVER=0.

The fork server is started by the first such call in a pytest worker and ends when the
worker does (its control socket closes). It forks from a single thread with no event loop,
no database connection and no DBOS launched: each child starts from a plain imported state.
Exit statuses come back through a pipe per child, since the child is the server's, not the
worker's.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import faulthandler
import fcntl
import gc
import importlib
import io
import json
import os
import runpy
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import types
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

# What the children import: loading it here makes it a fork's copy-on-write page instead of
# a second of CPU per process. Modules run with `-m` must not be among them (runpy would warn
# that they were imported before being run as __main__): `helix_dbos.cli.__main__` is not.
PRELOAD = (
    "asyncio",
    "dbos",
    "sqlalchemy",
    "psycopg",
    "psycopg_pool",
    "pydantic",
    "httpx",
    "fastapi",
    "uvicorn",
    "genai_prices",
    "helix_dbos",
    "helix_dbos.cli.main",
    "helix_dbos.server.app",
)

# Environment variables read when an interpreter starts (PYTHON*) or when a preloaded module
# is imported (found by reading their module-level code); a child that sets any of them
# differently from the server is exec'd. PYTHONUNBUFFERED and PYTHONDONTWRITEBYTECODE are
# applied in the child.
_APPLIED_IN_CHILD = frozenset({"PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE"})
_READ_AT_IMPORT = frozenset(
    {
        "DBOS__APPVERSION",
        "DBOS__VMID",
        "DBOS__CLOUD",
        "PSYCOPG_WAIT_FUNC",
        "DEFER_PYDANTIC_BUILD",
        "TYPER_USE_RICH",
        "TERMINAL_WIDTH",
        "_TYPER_FORCE_DISABLE_TERMINAL",
        "GITHUB_ACTIONS",
        "FORCE_COLOR",
        "PY_COLORS",
    }
)
_STATUS = struct.Struct("id")  # a child's wait status and the CPU seconds it used
_PID = struct.Struct("q")
_MAX_MESSAGE = 1 << 22


@dataclass(frozen=True)
class Launch:
    """What a child runs (a script, a module or a command string), with its argv,
    environment and directory."""

    script: str | None
    module: str | None
    command: str | None
    argv: list[str]
    env: dict[str, str]
    cwd: str
    unbuffered: bool
    new_session: bool
    umask: int
    targets: list[int]  # the descriptor number each received descriptor becomes


def _startup_env(env: dict[str, str]) -> dict[str, str]:
    """What of `env` the server's own start and imports have already read."""
    return {
        k: v
        for k, v in env.items()
        if (k.startswith("PYTHON") and k not in _APPLIED_IN_CHILD) or k in _READ_AT_IMPORT
    }


def _launch_for(
    args: Any, executable: Any, shell: bool, env: Any, cwd: Any, new_session: bool, umask: int
) -> Launch | None:
    """The Launch for a Popen call that may be forked, or None when it must be exec'd."""
    if os.environ.get("HELIX_TEST_FORKSERVER") == "0" or shell or executable is not None:
        return None
    if isinstance(args, (str, bytes, os.PathLike)):
        return None
    argv = [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else a for a in args]
    if not argv or not all(isinstance(a, str) for a in argv) or argv[0] != sys.executable:
        return None
    rest = argv[1:]
    unbuffered = False
    while rest and rest[0] == "-u":
        unbuffered, rest = True, rest[1:]
    child_env = dict(os.environ if env is None else env)
    if _startup_env(child_env) != _the_client().startup_env:
        return None
    workdir = os.path.abspath(os.fsdecode(cwd)) if cwd is not None else os.getcwd()
    common = dict(
        env={os.fsdecode(k): os.fsdecode(v) for k, v in child_env.items()},
        cwd=workdir,
        unbuffered=unbuffered or bool(child_env.get("PYTHONUNBUFFERED")),
        new_session=new_session,
        umask=umask,
        targets=[],
    )
    if len(rest) >= 2 and rest[0] == "-m" and not rest[1].startswith("-"):
        return Launch(None, rest[1], None, [rest[1], *rest[2:]], **common)  # type: ignore[arg-type]
    if len(rest) >= 2 and rest[0] == "-c":
        return Launch(None, None, rest[1], ["-c", *rest[2:]], **common)  # type: ignore[arg-type]
    script = rest[0] if rest else ""
    if script.endswith(".py") and os.path.isfile(os.path.join(workdir, script)):
        return Launch(rest[0], None, None, rest, **common)  # type: ignore[arg-type]
    return None


class _Client:
    """This worker's end of its fork server's control socket."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.startup_env = _startup_env(dict(os.environ))  # what the server starts with
        self._process = subprocess.Popen(
            [sys.executable, __file__, str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
        )
        theirs.close()
        self._socket = ours
        self._lock = threading.Lock()

    def spawn(self, launch: Launch, fds: Sequence[int]) -> int:
        message = json.dumps(asdict(launch)).encode()
        with self._lock:
            socket.send_fds(self._socket, [message], list(fds))
            reply = self._socket.recv(_PID.size)
        if len(reply) != _PID.size:
            raise RuntimeError("the fork server ended")
        (pid,) = _PID.unpack(reply)
        if pid <= 0:
            raise OSError(-pid, os.strerror(-pid), launch.argv[0])
        return pid


_client: _Client | None = None
_client_lock = threading.Lock()
_forked_cpu = 0.0


def forked_cpu_seconds() -> float:
    """CPU seconds of the forked children this process has waited for: what
    `RUSAGE_CHILDREN` counts for exec'd ones (they are the server's children, not ours)."""
    return _forked_cpu


def _the_client() -> _Client:
    global _client
    with _client_lock:
        if _client is None:
            _client = _Client()
        return _client


class Popen(subprocess.Popen):  # type: ignore[type-arg]
    """`subprocess.Popen` that forks Python children from the worker's fork server."""

    _status_fd: int | None = None

    def _execute_child(  # type: ignore[override]
        self,
        args: Any,
        executable: Any,
        preexec_fn: Any,
        close_fds: bool,
        pass_fds: Sequence[int],
        cwd: Any,
        env: Any,
        startupinfo: Any,
        creationflags: int,
        shell: bool,
        p2cread: int,
        p2cwrite: int,
        c2pread: int,
        c2pwrite: int,
        errread: int,
        errwrite: int,
        restore_signals: bool,
        gid: Any,
        gids: Any,
        uid: Any,
        umask: int,
        start_new_session: bool,
        *later: Any,  # process_group (3.11)
    ) -> None:
        everything = (args, executable, preexec_fn, close_fds, pass_fds, cwd, env)
        everything += (startupinfo, creationflags, shell, p2cread, p2cwrite, c2pread)
        everything += (c2pwrite, errread, errwrite, restore_signals, gid, gids, uid, umask)
        everything += (start_new_session, *later)
        plain = preexec_fn is None and gid is None and gids is None and uid is None
        plain = plain and all(v in (None, -1) for v in later)
        launch = plain and _launch_for(args, executable, shell, env, cwd, start_new_session, umask)
        if not launch:
            super()._execute_child(*everything)  # type: ignore[misc]
            return
        status_read, status_write = os.pipe()
        streams = [p2cread, c2pwrite, errwrite]
        fds = [status_write, *(fd if fd != -1 else i for i, fd in enumerate(streams)), *pass_fds]
        targets = [-1, 0, 1, 2, *pass_fds]
        try:
            self.pid = _the_client().spawn(replace(launch, targets=targets), fds)
        except BaseException:
            os.close(status_read)
            raise
        finally:
            os.close(status_write)
        self._child_created = True
        self._status_fd = status_read
        self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)

    def _status(self, block: bool) -> int | None:
        """The child's wait status from the fork server, or None while it runs."""
        fd = self._status_fd
        assert fd is not None
        if not block and not select.select([fd], [], [], 0)[0]:
            return None
        data = b""
        while len(data) < _STATUS.size:
            part = os.read(fd, _STATUS.size - len(data))
            if not part:
                break
            data += part
        os.close(fd)
        self._status_fd = -1
        if len(data) != _STATUS.size:
            raise ChildProcessError(f"the fork server lost process {self.pid}")
        status, cpu = _STATUS.unpack(data)
        global _forked_cpu
        with _client_lock:
            _forked_cpu += cpu
        return int(status)

    def _internal_poll(self, _deadstate: Any = None, *args: Any, **kwargs: Any) -> int | None:
        if self._status_fd is None:
            return super()._internal_poll(_deadstate, *args, **kwargs)  # type: ignore[misc, no-any-return]
        if self.returncode is None and self._waitpid_lock.acquire(False):  # type: ignore[attr-defined]
            try:
                if self.returncode is None and self._status_fd != -1:
                    status = self._status(block=False)
                    if status is not None:
                        self._handle_exitstatus(status)  # type: ignore[attr-defined]
            except OSError:
                if _deadstate is not None:
                    self.returncode = _deadstate
            finally:
                self._waitpid_lock.release()  # type: ignore[attr-defined]
        return self.returncode

    def _try_wait(self, wait_flags: int) -> tuple[int, int]:
        if self._status_fd is None:
            return super()._try_wait(wait_flags)  # type: ignore[misc, no-any-return]
        status = self._status(block=not wait_flags & os.WNOHANG)
        return (0, 0) if status is None else (self.pid, status)


def run(
    args: Any,
    *,
    input: Any = None,
    capture_output: bool = False,
    timeout: float | None = None,
    check: bool = False,
    **kwargs: Any,
) -> subprocess.CompletedProcess[Any]:
    """`subprocess.run` on this module's `Popen`."""
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    with Popen(args, **kwargs) as process:
        try:
            stdout, stderr = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
        except BaseException:
            process.kill()
            raise
        code = process.poll()
        assert code is not None
        if check and code:
            raise subprocess.CalledProcessError(code, process.args, stdout, stderr)
    return subprocess.CompletedProcess(process.args, code, stdout, stderr)


# The server side: everything below runs in the fork server and its children.


def _receive(control: socket.socket) -> tuple[Launch, list[int]] | None:
    try:
        message, fds, _, _ = socket.recv_fds(control, _MAX_MESSAGE, 64)
    except ConnectionError:
        return None
    if not message:
        for fd in fds:
            os.close(fd)
        return None
    return Launch(**json.loads(message)), list(fds)


def _become(launch: Launch, fds: list[int]) -> None:
    """In the child: take the launch's descriptors, streams, directory and environment."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    if launch.new_session:
        os.setsid()
    # Out of the way of the target numbers first, so no dup2 closes a descriptor still to move.
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 1024) for fd in fds]
    keep = set(launch.targets)
    for fd, target in zip(high, launch.targets, strict=True):
        os.dup2(fd, target)
    for entry in os.listdir("/proc/self/fd"):
        fd = int(entry)
        if fd not in keep:
            with contextlib.suppress(OSError):  # the listing's own descriptor is gone
                os.close(fd)
    os.chdir(launch.cwd)
    os.environ.clear()
    os.environ.update(launch.env)
    time.tzset()
    if launch.umask >= 0:
        os.umask(launch.umask)
    sys.dont_write_bytecode = bool(launch.env.get("PYTHONDONTWRITEBYTECODE"))
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        old = getattr(sys, name)
        stream = _stream(fd, old, unbuffered=launch.unbuffered)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)
    faulthandler.enable()  # a crash of the interpreter shows where it was, on stderr


def _stream(fd: int, old: Any, *, unbuffered: bool) -> io.TextIOWrapper:
    """A standard stream on `fd` as the interpreter would have made it at startup."""
    reading = fd == 0
    raw = io.FileIO(fd, "r" if reading else "w", closefd=False)
    buffered: Any
    if reading:
        buffered = io.BufferedReader(raw)
    elif unbuffered:
        buffered = raw
    else:
        buffered = io.BufferedWriter(raw)
    tty = raw.isatty()
    return io.TextIOWrapper(
        buffered,
        encoding=old.encoding,
        errors=old.errors,
        line_buffering=(not reading) and (tty or fd == 2),
        write_through=(not reading) and unbuffered,
    )


def _serve(control_fd: int) -> tuple[Launch, list[int]] | None:
    """Fork a child per request until the worker goes; in a child, return its launch."""
    control = socket.socket(fileno=control_fd)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    status_pipes: dict[int, int] = {}
    while True:
        readable = select.select([control, wake_read], [], [])[0]
        if wake_read in readable:
            os.read(wake_read, 4096)
        while status_pipes:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            fd = status_pipes.pop(pid, None)
            if fd is not None:
                os.write(fd, _STATUS.pack(status, usage.ru_utime + usage.ru_stime))
                os.close(fd)
        if control not in readable:
            continue
        received = _receive(control)
        if received is None:
            return None
        launch, fds = received
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError as error:
            for fd in fds:
                os.close(fd)
            control.send(_PID.pack(-(error.errno or 1)))
            continue
        if pid == 0:
            for fd in status_pipes.values():
                os.close(fd)
            control.close()
            os.close(wake_read)
            os.close(wake_write)
            return launch, fds
        status_pipes[pid] = fds[0]
        for fd in fds[1:]:
            os.close(fd)
        control.send(_PID.pack(pid))


def _run(launch: Launch, fds: list[int]) -> None:
    os.close(fds[0])  # the status pipe is the server's to write
    _become(replace(launch, targets=launch.targets[1:]), fds[1:])
    sys.argv = list(launch.argv)
    if launch.module is not None:
        sys.path[0] = launch.cwd
        runpy.run_module(launch.module, run_name="__main__", alter_sys=True)
    elif launch.command is not None:
        sys.path[0] = ""
        main = types.ModuleType("__main__")
        main.__dict__["__builtins__"] = builtins
        sys.modules["__main__"] = main
        exec(compile(launch.command, "<string>", "exec"), main.__dict__)
    else:
        assert launch.script is not None
        sys.path[0] = os.path.dirname(os.path.realpath(launch.script))
        runpy.run_path(launch.script, run_name="__main__")


def _exit(run: Any, *args: Any) -> None:
    """Run, then end as the interpreter would, less the teardown of every module the server
    imported (0.1 s of a child's CPU): report an uncaught exception, wait for the threads
    that are not daemons, run the `atexit` functions, flush the streams, exit."""
    code = 0
    try:
        run(*args)
    except SystemExit as stop:
        if stop.code is None:
            code = 0
        elif isinstance(stop.code, int):
            code = stop.code
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        raise  # the interpreter ends by SIGINT, as an exec'd child would
    except BaseException:
        sys.excepthook(*sys.exc_info())  # type: ignore[arg-type]
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code & 0xFF)


if __name__ == "__main__":
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    package = sys.modules.get("helix_dbos")
    for name in getattr(package, "__all__", ()):  # what `from helix_dbos import ...` loads
        getattr(package, name)
    gc.freeze()  # the children's collections skip what they inherit (and leave it shared)
    child = _serve(int(sys.argv[1]))
    if child is not None:
        _exit(_run, *child)
