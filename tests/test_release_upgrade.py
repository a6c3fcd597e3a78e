"""The release test (issue 45): runs started on the previous release finish on this code.

The previous release is pinned in .ci/previous-release (a commit and its version). Its
code comes from the git history (`git archive <commit> helix_dbos migrations
pyproject.toml`) and runs with this venv on PYTHONPATH when this venv satisfies its
dependencies (else in a venv of its own, built once in .ci/previous/<commit>/).
tests/apps/release_app.py, which uses only public API of both releases and helix's defaults
(application name, version, executor id), starts every scenario on the old code, on a
database the old code migrates:

- an approval waiting, answered after the upgrade (its tool runs once, in the new code);
- a run inside a slow tool (the call cut off runs again; the completed one does not);
- a parked long wait (the oldest of three waits, parked at the sweep; answered after);
- a sub-agent child waiting for an approval (answered through its root session);
- a run holding the only call slot of a limited model, and a run queued for it;
- a run in a tool with a second message queued behind it (double texting);
- a remote sub-agent in flight (this process is the remote server as well);
- a scheduled firing whose run is in a tool (and a second firing after the upgrade);
- a completed session, continued after the upgrade (its second turn sees the first).

The test polls SQL (and the app's marker files) until each scenario is at its point,
SIGKILLs the old process and launches the working tree's code on the same database, as a
user upgrading in place would: a new process, a new executor id, which claims the dead
worker's runs once its lease runs out. It answers what waits, then checks that every run
and workflow completed, that no completed tool call or model call ran again (each is
counted in a file with the life it ran in), and that no transcript holds a duplicate.

Without the pinned commit in the history (a shallow clone) the test fails in CI (CI=true)
and is skipped elsewhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import forkserver
import pytest
from helpers import sql, wait_for
from live_server import free_port
from release_code import (
    PIN,
    Interpreter,
    PreviousRelease,
    previous_code,
    previous_release,
    unsatisfied,
)

REPO = Path(__file__).resolve().parent.parent
APP = Path(__file__).parent / "apps" / "release_app.py"
pytestmark = [pytest.mark.crash, pytest.mark.release]


class App:
    """One life of tests/apps/release_app.py; its first output line is its report."""

    def __init__(self, mode: str, code: Interpreter, database_url: str, port: int, markers: Path):
        env = {
            k: v
            for k, v in os.environ.items()
            if k != "PYTHONPATH" and not k.startswith("HELIX_")  # helix's defaults
        }
        if code.path is not None:
            env["PYTHONPATH"] = code.path
        self.out = markers / f"{mode}.out"
        self.err = markers / f"{mode}.err"
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.proc = forkserver.Popen(
                [code.python, str(APP), mode, database_url, str(port), str(markers)],
                stdout=out,
                stderr=err,
                env=env,
                cwd=markers,
            )

    def report(self, timeout: float = 120) -> dict[str, Any]:
        def printed() -> bool:
            assert self.proc.poll() is None, self.err.read_text()[-3000:]
            return bool(self.out.read_text().strip())

        wait_for(printed, timeout=timeout)
        result: dict[str, Any] = json.loads(self.out.read_text().splitlines()[0])
        return result

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


def marked(markers: Path, name: str) -> list[str]:
    path = markers / name
    return path.read_text().splitlines() if path.exists() else []


def one(database_url: str, query: str, *params: Any) -> Any:
    rows = sql(database_url, query, *params)
    return rows[0][0] if rows else None


def workflow_of(database_url: str, run_id: str) -> str:
    return str(one(database_url, "SELECT workflow_id FROM helix.runs WHERE run_id = %s", run_id))


def pending_calls(database_url: str, session_ids: list[str]) -> list[str]:
    rows = sql(
        database_url,
        "SELECT tool_call_id FROM helix.tool_calls WHERE status = 'pending' AND session_id IN "
        "(SELECT session_id FROM helix.sessions WHERE session_id = ANY(%s) "
        "OR parent_session_id = ANY(%s))",
        session_ids,
        session_ids,
    )
    return [r[0] for r in rows]


def at_their_points(database_url: str, markers: Path, ids: dict[str, Any]) -> dict[str, bool]:
    """Whether each scenario is where the old code is to be killed."""
    sid = {k: v.get("session_id") for k, v in ids.items()}
    parked_workflow = workflow_of(database_url, ids["parked"]["run_id"])
    remote = one(
        database_url,
        "SELECT remote_run_id FROM helix.remote_children WHERE parent_session_id = %s",
        sid["remote"],
    )
    firing_run = one(
        database_url,
        "SELECT run_id FROM helix.schedule_firings WHERE firing_id = %s",
        ids["firing"]["firing_id"],
    )
    return {
        "parked": any(parked_workflow in line for line in marked(markers, "parked.log"))
        and pending_calls(database_url, [sid["parked"]]) == ["p1"],
        "approval": pending_calls(database_url, [sid["approval"]]) == ["a1"],
        "slow_tool": (markers / "in_slow_two").exists(),
        "child_approval": pending_calls(database_url, [sid["child_approval"]]) == ["c1"],
        "slot": one(
            database_url,
            "SELECT queued_for FROM helix.runs WHERE run_id = %s",
            ids["slot_waiter"]["run_id"],
        )
        is not None
        and (markers / "in_slot_call").exists(),
        "double_text": (markers / "in_slow_texter").exists()
        and one(
            database_url,
            "SELECT status FROM helix.queued_messages WHERE message_id = %s",
            ids["double_text"]["message_id"],
        )
        == "queued",
        "remote": remote is not None and (markers / "in_slow_remote").exists(),
        "firing": firing_run is not None and (markers / "in_slow_tick").exists(),
        "continued": one(
            database_url,
            "SELECT status FROM helix.runs WHERE run_id = %s",
            ids["continued"]["run_id"],
        )
        == "completed",
    }


def all_ended(database_url: str) -> bool:
    live_runs = one(
        database_url,
        "SELECT count(*) FROM helix.runs WHERE status IN ('running', 'waiting', 'paused')",
    )
    queued = one(database_url, "SELECT count(*) FROM helix.queued_messages WHERE status = 'queued'")
    live_workflows = one(
        database_url,
        "SELECT count(*) FROM dbos.workflow_status WHERE status IN ('PENDING', 'ENQUEUED')",
    )
    return live_runs == 0 and queued == 0 and live_workflows == 0


def assert_transcripts_clean(database_url: str) -> None:
    """No session has a duplicate message, a gap, or a tool call without one result."""
    for (session_id,) in sql(database_url, "SELECT session_id FROM helix.sessions"):
        rows = sql(
            database_url,
            "SELECT seq, role, content, tool_calls, tool_call_id FROM helix.messages "
            "WHERE session_id = %s ORDER BY seq",
            session_id,
        )
        assert [r[0] for r in rows] == list(range(1, len(rows) + 1)), session_id
        asked = [c["id"] for r in rows if r[3] for c in r[3]]
        answered = [r[4] for r in rows if r[1] == "tool"]
        assert sorted(asked) == sorted(answered), (session_id, rows)
        assert len(answered) == len(set(answered)), (session_id, rows)
        users = [r[2] for r in rows if r[1] == "user"]
        assert len(users) == len(set(users)), (session_id, users)


# Every model call, by agent: (life, the last user message) -> how many. A call whose
# step the old code checkpointed never runs again.
EXPECTED_MODEL_CALLS = {
    "parker": {("start", "park it"): 1, ("finish", "park it"): 1},
    "approver": {("start", "approve it"): 1, ("finish", "approve it"): 1},
    "toolman": {("start", "work"): 2, ("finish", "work"): 1},
    "gated_child": {("start", "ask"): 1, ("finish", "ask"): 1},
    "delegator": {("start", "delegate"): 1, ("finish", "delegate"): 1},
    # the slot holder's call was cut off (not checkpointed): it runs again, once
    "slotted": {
        ("start", "hold the slot"): 1,
        ("finish", "hold the slot"): 1,
        ("finish", "wait for the slot"): 1,
    },
    "texter": {("start", "first"): 1, ("finish", "first"): 1, ("finish", "second"): 1},
    "remote_lead": {("start", "go remote"): 1, ("finish", "go remote"): 1},
    "remote_worker": {("start", "fetch"): 1, ("finish", "fetch"): 1},
    "ticker": {("start", "tick"): 1, ("finish", "tick"): 3},  # and the second firing's 2
    "chatter": {("start", "hello"): 1, ("finish", "again"): 1},
}


def model_calls(markers: Path, agent: str) -> dict[tuple[str, str], int]:
    lines = marked(markers, f"llm_{agent}.log")
    return dict(Counter(tuple(line.split(" ", 1)) for line in lines))  # type: ignore[misc]


def test_runs_started_on_the_previous_release_finish_on_this_code(
    empty_database_url: str, tmp_path: Path
) -> None:
    database_url = empty_database_url
    old_code = previous_code(previous_release(), tmp_path / "previous")
    markers = tmp_path / "markers"
    markers.mkdir()
    port = free_port()

    old = App("start", old_code, database_url, port, markers)
    try:
        started = old.report()
        assert started["code"].startswith(str(tmp_path / "previous")), started["code"]
        ids = started["ids"]
        points: dict[str, bool] = {}

        def all_there() -> bool:
            assert old.proc.poll() is None, old.err.read_text()[-3000:]
            points.update(at_their_points(database_url, markers, ids))
            return all(points.values())

        try:
            wait_for(all_there, timeout=90)
        except AssertionError:
            raise AssertionError(f"not every scenario reached its point: {points}") from None
    finally:
        old.kill()

    sid = {k: v.get("session_id") for k, v in ids.items()}
    (markers / "answers.json").write_text(
        json.dumps(
            {
                "approve_in": [sid["approval"], sid["parked"], sid["child_approval"]],
                "continue_session": sid["continued"],
            }
        )
    )
    new = App("finish", Interpreter(sys.executable, None), database_url, port, markers)
    try:
        finished = new.report()
        assert finished["code"].startswith(str(REPO / "helix_dbos")), finished["code"]
        assert sorted(finished["approved"]) == ["a1", "c1", "p1"]
        wait_for(lambda: all_ended(database_url), timeout=180)
    finally:
        new.stop()

    # Every run completed, and every workflow (runs, children, slots, firings) succeeded.
    runs = sql(database_url, "SELECT agent_name, status, error FROM helix.runs ORDER BY agent_name")
    assert [r for r in runs if r[1] != "completed"] == [], runs
    assert Counter(r[0] for r in runs) == {
        "parker": 1,
        "approver": 1,
        "toolman": 1,
        "gated_child": 1,
        "delegator": 1,
        "slotted": 2,
        "texter": 2,
        "remote_lead": 1,
        "remote_worker": 1,
        "ticker": 2,
        "chatter": 2,
    }
    failed = sql(
        database_url,
        "SELECT name, status, error FROM dbos.workflow_status WHERE status <> 'SUCCESS'",
    )
    assert failed == [], failed

    # Nothing completed ran again: each approved tool ran once, in the new code; the
    # completed `record` once, in the old; the calls cut off by the kill once in each.
    assert sorted(marked(markers, "guarded.log")) == [
        "finish /approved",
        "finish /child",
        "finish /parked",
    ]
    assert marked(markers, "record.log") == ["start one"]
    assert Counter(marked(markers, "slow.log")) == {
        "start two": 1,
        "finish two": 1,
        "start texter": 1,
        "finish texter": 1,
        "start remote": 1,
        "finish remote": 1,
        "start tick": 1,
        "finish tick": 2,  # the first firing's call again, and the second firing's
    }
    for agent, expected in EXPECTED_MODEL_CALLS.items():
        assert model_calls(markers, agent) == expected, agent

    # No duplicate message anywhere; the answers the runs ended with.
    assert_transcripts_clean(database_url)

    def output(run_id: str) -> Any:
        return one(
            database_url,
            "SELECT s.output FROM helix.runs r JOIN helix.sessions s USING (session_id) "
            "WHERE r.run_id = %s",
            run_id,
        )

    assert output(ids["approval"]["run_id"]) == "approver: approve it | wrote /approved"
    assert output(ids["parked"]["run_id"]) == "parker: park it | wrote /parked"
    assert output(ids["slow_tool"]["run_id"]) == "toolman: work | recorded one | slow two"
    assert output(ids["child_approval"]["run_id"]) == (
        "delegator: delegate | gated_child: ask | wrote /child"
    )
    assert (
        output(ids["remote"]["run_id"])
        == "remote_lead: go remote | remote_worker: fetch | slow remote"
    )
    assert output(finished["continued"]) == "chatter: hello | again"  # it saw the first turn
    queued = sql(
        database_url,
        "SELECT q.status, r.status, r.turn FROM helix.queued_messages q "
        "JOIN helix.runs r USING (run_id) WHERE q.message_id = %s",
        ids["double_text"]["message_id"],
    )
    assert queued == [("started", "completed", 2)]
    firings = sql(
        database_url,
        "SELECT f.firing_id, f.outcome, r.status FROM helix.schedule_firings f "
        "JOIN helix.runs r USING (run_id) ORDER BY f.scheduled_at",
    )
    assert sorted((f[0], f[1], f[2]) for f in firings) == sorted(
        [
            (ids["firing"]["firing_id"], "started", "completed"),
            (finished["fired"], "started", "completed"),
        ]
    )


def test_a_release_missing_from_the_history_fails_in_ci_and_is_skipped_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = PreviousRelease("0" * 40, "0.0.1")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="not in this clone's history"):
        previous_code(gone, tmp_path / "ci")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="git fetch --unshallow"):
        previous_code(gone, tmp_path / "here")


def test_the_previous_releases_dependencies_are_checked_against_this_venv(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[project]\nname = "x"\ndependencies = [\n  "pydantic>=2",\n  "dbos>=999",\n'
        '  "no-such-package-helix-test>=1",\n  "psycopg>=1; python_version < \'3\'",\n]\n'
    )
    assert unsatisfied(pyproject) == ["dbos>=999", "no-such-package-helix-test>=1"]
    assert previous_release().commit in PIN.read_text()
    assert unsatisfied(REPO / "pyproject.toml") == []  # this venv runs this code
