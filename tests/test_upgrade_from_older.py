"""An upgrade from a development build two versions back (issue 45), as a user does it.

A run waits for an approval on the main of 2026-11-25 (`b962e8e`, application version
`helix-4`, taken from the git history); that process is killed and today's code is
launched on the same database with its defaults (`helix-6`). Then:
- an answer to the old run is refused (`helix-dbos approve` exits 2 naming `helix-4`),
  nothing is claimed and no message is sent;
- `helix-dbos doctor` lists the run under `run versions` with both fixes;
- the first fix works: a worker of that version from that build
  (`HELIX_APP_VERSION=helix-4 helix-dbos worker`) is started, the same `approve` is now
  accepted, and the tool runs exactly once;
- the second fix works: `helix-dbos abort --version helix-4` ends a second stranded run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import forkserver
import pytest
from helpers import sql, wait_for
from release_code import Interpreter, PreviousRelease, previous_code

REPO = Path(__file__).resolve().parent.parent
OLD_COMMIT = (
    "b962e8e7f764f65530f4ae1245165edc4993474e"  # main of 2026-11-25, DEFAULT_APP_VERSION "helix-4"
)
OLD_VERSION = "helix-4"

APP = '''
import os
from pathlib import Path

from helix_dbos import Agent, HelixDBOS, MockLLM, tool

markers = Path(os.environ["UPGRADE_MARKERS"])


@tool(require_approval=True)
def delete_file(path: str) -> str:
    """Delete a file."""
    with open(markers / "ran.log", "a") as f:
        f.write(path + "\\n")
    return f"deleted {path}"


def respond(request):
    if any(m.role == "tool" for m in request.messages):
        return {"type": "text", "content": "done"}
    text = request.messages[-1].content
    path = "/data/" + text.split()[-1]
    call = {"id": "d1", "name": "delete_file", "arguments": {"path": path}}
    return {"type": "tool_calls", "tool_calls": [call]}


agent = Agent("upgrade_agent", system_prompt="You delete files.", tools=[delete_file])
helix = HelixDBOS(agents=[agent], llm=MockLLM(respond))
'''

START = """
import asyncio, json, sys, time
import upgrade_app

async def main():
    upgrade_app.helix.launch()
    for name in sys.argv[1:]:
        handle = await upgrade_app.helix.execute(upgrade_app.agent, f"delete {name}")
        print(json.dumps({"run_id": handle.run_id, "session_id": handle.session_id}), flush=True)
    while True:
        await asyncio.sleep(1)

asyncio.run(main())
"""

pytestmark = pytest.mark.crash


@pytest.fixture
def old_code(tmp_path: Path) -> Interpreter:
    """The old build, from the git history, and the interpreter that runs it."""
    return previous_code(PreviousRelease(OLD_COMMIT, OLD_VERSION), tmp_path / "old")


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "app"
    (folder / "markers").mkdir(parents=True)
    (folder / "upgrade_app.py").write_text(APP)
    (folder / "start.py").write_text(START)
    return folder


def env_for(
    database_url: str, app_dir: Path, code: Interpreter | None, **extra: str
) -> dict[str, str]:
    """A process of the old build (`code`) or of this one."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("HELIX_")}
    path = [str(app_dir), (code.path if code is not None else None) or str(REPO)]
    return {
        **base,
        "PYTHONPATH": os.pathsep.join(path),
        "HELIX_DATABASE_URL": database_url,
        "UPGRADE_MARKERS": str(app_dir / "markers"),
        **extra,
    }


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)


def spawn(
    processes: list[subprocess.Popen[str]],
    args: list[str],
    env: dict[str, str],
    cwd: Path,
    python: str = sys.executable,
) -> subprocess.Popen[str]:
    proc = forkserver.Popen([python, *args], env=env, cwd=cwd, stdout=subprocess.PIPE, text=True)
    processes.append(proc)
    return proc


def cli(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return forkserver.run(
        [sys.executable, "-m", "helix_dbos.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def live_worker(database_url: str, proc: subprocess.Popen[str], version: str) -> None:
    wait_for(
        lambda: sql(
            database_url,
            "SELECT 1 FROM helix.workers WHERE pid = %s AND state = 'live' "
            "AND application_version = %s",
            proc.pid,
            version,
        ),
        timeout=120,
    )


def test_a_run_two_versions_back_is_refused_listed_and_finished_by_its_fix(
    empty_database_url: str,
    old_code: Interpreter,
    app_dir: Path,
    processes: list[subprocess.Popen[str]],
) -> None:
    url = empty_database_url
    old_env = env_for(url, app_dir, old_code)
    new_env = env_for(url, app_dir, None)

    # 1. Two runs wait for an approval on the old build; the process dies.
    old = spawn(processes, ["start.py", "first", "second"], old_env, app_dir, old_code.python)
    assert old.stdout is not None
    first = json.loads(old.stdout.readline())
    second = json.loads(old.stdout.readline())
    wait_for(
        lambda: (
            sql(url, "SELECT count(*) FROM helix.tool_calls WHERE status = 'pending'")[0][0] == 2
        ),
        timeout=120,
    )
    assert sql(
        url,
        "SELECT DISTINCT application_version FROM dbos.workflow_status WHERE workflow_uuid IN "
        "(SELECT workflow_id FROM helix.runs)",
    ) == [(OLD_VERSION,)]
    old.send_signal(signal.SIGKILL)
    old.wait(timeout=30)

    # 2. Today's code on the same database, with its defaults.
    new = spawn(
        processes,
        ["-m", "helix_dbos.cli", "worker", "--app", "upgrade_app:helix"],
        new_env,
        app_dir,
    )
    live_worker(url, new, "helix-6")
    # A worker killed a moment ago still counts as live for two fifths of its lease and
    # half a second (6.5 s, migration 0026): the new worker is usually up sooner.
    wait_for(
        lambda: not sql(url, "SELECT helix.version_served(%s)", OLD_VERSION)[0][0],
        timeout=60,
    )

    refused = cli(new_env, app_dir, "approve", first["session_id"], "d1")
    assert refused.returncode == 2
    assert "application version 'helix-4'" in refused.stderr
    assert "HELIX_APP_VERSION=helix-4" in refused.stderr
    assert sql(url, "SELECT count(*) FROM helix.tool_calls WHERE answered_at IS NOT NULL") == [(0,)]
    assert sql(url, "SELECT count(*) FROM dbos.notifications") == [(0,)]

    doctor = cli(new_env, app_dir, "doctor", "--json")
    check = next(c for c in json.loads(doctor.stdout) if c["name"] == "run versions")
    assert check["level"] == "warn"
    assert first["run_id"] in check["found"] and second["run_id"] in check["found"]
    assert "HELIX_APP_VERSION=helix-4 helix-dbos worker" in check["fix"]
    assert "helix-dbos abort --version helix-4" in check["fix"]
    listed = json.loads(cli(new_env, app_dir, "runs", "--version", OLD_VERSION, "--json").stdout)
    assert {r["run_id"] for r in listed} == {first["run_id"], second["run_id"]}

    # 3. The first fix: a worker of that version, from that build, takes the old runs
    # over; the same answer is now accepted, and the tool runs once.
    old_worker = spawn(
        processes,
        ["-m", "helix_dbos.cli", "worker", "--app", "upgrade_app:helix"],
        {**old_env, "HELIX_APP_VERSION": OLD_VERSION},
        app_dir,
        old_code.python,
    )
    live_worker(url, old_worker, OLD_VERSION)
    approved = cli(new_env, app_dir, "approve", first["session_id"], "d1")
    assert approved.returncode == 0, approved.stderr
    wait_for(
        lambda: (
            sql(url, "SELECT status FROM helix.runs WHERE run_id = %s", first["run_id"])
            == [("completed",)]
        ),
        timeout=120,
    )
    assert (app_dir / "markers" / "ran.log").read_text().splitlines() == ["/data/first"]

    # With the old worker gone again, the second run is stranded: abort it by version.
    old_worker.send_signal(signal.SIGTERM)
    assert old_worker.wait(timeout=60) == 0
    assert sql(url, "SELECT state FROM helix.workers WHERE pid = %s", old_worker.pid) == [
        ("stopped",)
    ]
    assert cli(new_env, app_dir, "approve", second["session_id"], "d1").returncode == 2
    aborted = cli(new_env, app_dir, "abort", "--version", OLD_VERSION, "--json")
    assert aborted.returncode == 0, aborted.stderr
    assert json.loads(aborted.stdout)["run_ids"] == [second["run_id"]]
    assert sql(url, "SELECT status FROM helix.runs WHERE run_id = %s", second["run_id"]) == [
        ("aborted",)
    ]
    # Its call has its error result: the session can be continued on today's code.
    assert sql(url, "SELECT status FROM helix.tool_calls WHERE run_id = %s", second["run_id"]) != [
        ("pending",)
    ]
    assert (app_dir / "markers" / "ran.log").read_text().splitlines() == ["/data/first"]
    doctor = cli(new_env, app_dir, "doctor", "--json")
    check = next(c for c in json.loads(doctor.stdout) if c["name"] == "run versions")
    assert check["level"] == "ok", check
