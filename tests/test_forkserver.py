"""The suite's fork server (tests/apps/forkserver.py): a forked child behaves as the
exec'd one would, to the test that started it (arguments, environment, directory, streams,
descriptors, exit status, signals), and what a fork cannot give is exec'd."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import forkserver
import pytest

pytestmark = pytest.mark.skipif(
    os.environ.get("HELIX_TEST_FORKSERVER") == "0",
    reason="HELIX_TEST_FORKSERVER=0: every child is exec'd",
)

PROBE = textwrap.dedent(
    """
    import json, os, sys
    print(json.dumps({
        "argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0], "name": __name__,
        "env": os.environ.get("FORK_PROBE"), "ppid": os.getppid(), "pid": os.getpid(),
        "sid": os.getsid(0), "dbos": "dbos" in sys.modules,
    }), flush=True)
    if len(sys.argv) > 1 and sys.argv[1] == "wait":
        sys.stdin.readline()
    raise SystemExit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    """
)


@pytest.fixture
def probe(tmp_path: Path) -> Path:
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    return script


def read(done: subprocess.CompletedProcess[str]) -> dict:
    return json.loads(done.stdout)


def test_a_script_is_forked_with_its_arguments_environment_and_directory(
    probe: Path, tmp_path: Path
) -> None:
    env = {**os.environ, "FORK_PROBE": "ünï"}
    done = forkserver.run(
        [sys.executable, probe.name, "x", "7"], cwd=tmp_path, env=env, capture_output=True,
        text=True,
    )  # fmt: skip
    seen = read(done)
    assert done.returncode == 7
    assert seen["argv"] == [probe.name, "x", "7"]
    assert seen["cwd"] == str(tmp_path)
    assert seen["path0"] == str(tmp_path.resolve())
    assert seen["name"] == "__main__"
    assert seen["env"] == "ünï"
    # Forked from the server (its parent), which had imported dbos: not a new interpreter.
    assert seen["ppid"] != os.getpid()
    assert seen["dbos"] is True
    again = read(forkserver.run([sys.executable, str(probe)], capture_output=True, text=True))
    assert again["pid"] != seen["pid"] and again["ppid"] == seen["ppid"]
    assert again["env"] is None  # nothing of the previous child's environment is left


def test_a_module_and_a_command_string_run_as_main() -> None:
    done = forkserver.run(
        [sys.executable, "-m", "helix_dbos.cli", "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0 and "Usage" in done.stdout, done.stderr
    assert "RuntimeWarning" not in done.stderr
    code = "import sys; print(__name__, sys.argv); raise SystemExit(3)"
    done = forkserver.run([sys.executable, "-c", code, "a"], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (3, "__main__ ['-c', 'a']\n")
    failed = forkserver.run([sys.executable, "-c", "1/0"], capture_output=True, text=True)
    assert failed.returncode == 1 and "ZeroDivisionError" in failed.stderr


def test_sigkill_and_sigterm_reach_the_child_and_come_back_as_its_status(probe: Path) -> None:
    for sig in (signal.SIGKILL, signal.SIGTERM):
        proc = forkserver.Popen(
            [sys.executable, str(probe), "wait"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert proc.stdout is not None
        proc.stdout.readline()  # it runs
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=0.2)
        assert proc.poll() is None
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == -sig
        assert proc.poll() == -sig
        proc.send_signal(sig)  # after its end: nothing, as with subprocess


def test_streams_descriptors_and_sessions_are_the_callers(probe: Path, tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    code = f"import os; os.write({write_end}, b'through'); print(os.getsid(0) == os.getpid())"
    with open(tmp_path / "out", "w") as out:
        done = forkserver.run(
            [sys.executable, "-c", code], pass_fds=[write_end], stdout=out, start_new_session=True
        )
    os.close(write_end)
    assert done.returncode == 0
    assert os.read(read_end, 100) == b"through"
    os.close(read_end)
    assert (tmp_path / "out").read_text() == "True\n"
    # Input on stdin, stderr into stdout, a large output that needs the reader to keep up.
    code = "import sys; sys.stderr.write('e'); print(sys.stdin.read() * 50000)"
    done = forkserver.run(
        [sys.executable, "-c", code], input="ab", stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert done.stdout == "e" + "ab" * 50000 + "\n"


def test_what_a_fork_cannot_give_is_execd(probe: Path) -> None:
    server = forkserver._the_client()
    env = {**os.environ, "PYTHONPATH": str(probe.parent)}
    exec_d = read(
        forkserver.run([sys.executable, str(probe)], env=env, capture_output=True, text=True)
    )
    assert exec_d["ppid"] == os.getpid() and exec_d["dbos"] is False
    for argv in ([sys.executable, "-X", "importtime", str(probe)], ["/bin/sh", "-c", "exit 4"]):
        assert forkserver.run(argv, capture_output=True).returncode in (0, 4)
    off = {**os.environ, "HELIX_TEST_FORKSERVER": "0"}
    os.environ["HELIX_TEST_FORKSERVER"] = "0"
    try:
        plain = read(
            forkserver.run([sys.executable, str(probe)], env=off, capture_output=True, text=True)
        )
    finally:
        del os.environ["HELIX_TEST_FORKSERVER"]
    assert plain["ppid"] == os.getpid()
    assert server is forkserver._the_client()


def test_a_timeout_kills_the_child(probe: Path) -> None:
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        forkserver.run([sys.executable, "-c", "import time; time.sleep(60)"], timeout=0.5)
    assert time.monotonic() - started < 30


def test_a_child_ends_as_the_interpreter_would() -> None:
    """Its threads are joined, its atexit functions run, its output flushed, its exit code
    the interpreter's, though the modules it inherited are not torn down."""
    code = textwrap.dedent(
        """
        import atexit, sys, threading, time
        atexit.register(lambda: sys.stdout.write("atexit;"))
        threading.Thread(target=lambda: (time.sleep(0.3), sys.stdout.write("thread;"))).start()
        sys.stdout.write("unflushed;")
        raise SystemExit(sys.argv[1] if sys.argv[1] == "text" else int(sys.argv[1]))
        """
    )
    for arg, status in (("0", 0), ("300", 300 & 0xFF), ("text", 1)):
        done = forkserver.run([sys.executable, "-c", code, arg], capture_output=True, text=True)
        assert done.returncode == status
        assert done.stdout == "unflushed;thread;atexit;"
        assert done.stderr == ("text\n" if arg == "text" else "")


def test_a_forked_childs_cpu_is_counted_once_it_is_waited_for() -> None:
    """The CPU report (tests/cpu_report.py) adds it, as RUSAGE_CHILDREN does for exec'd ones."""
    before = forkserver.forked_cpu_seconds()
    burn = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"
    assert forkserver.run([sys.executable, "-c", burn]).returncode == 0
    assert 0.25 <= forkserver.forked_cpu_seconds() - before < 5
