"""Limits per model and per tenant (docs/limits.md), with real worker processes on one
database (tests/apps/limits_app.py): the limit holds across the fleet, a small tenant is not
starved by a big one, a run waiting for a slot shows as queued, and a worker killed
while runs wait leaves every run to finish once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import forkserver
import pytest
from helpers import sql, wait_for
from test_workers import executor_of, run_cli, started, stop

from helix_dbos import Agent, LLMConfig
from helix_dbos.errors import AgentDefinitionError
from helix_dbos.runtime.process import model_limits

APP = Path(__file__).parent / "apps" / "limits_app.py"
pytestmark = pytest.mark.crash


def spawn(mode: str, database_url: str, markers: Path, env: dict[str, str]) -> subprocess.Popen:
    stderr = open(markers / f"stderr-{mode}-{time.monotonic_ns()}.log", "w")  # noqa: SIM115
    return forkserver.Popen(
        [sys.executable, str(APP), mode, database_url, str(markers)],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env={**os.environ, **env},
    )


def front(database_url: str, markers: Path, env: dict[str, str]) -> list[dict]:
    proc = spawn("front", database_url, markers, env)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, (markers / "..").resolve()
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows[-1] == {"done": True}
    return rows[:-1]


def calls(markers: Path) -> list[tuple[str, int, float, float]]:
    """Every model call that returned: (tag, pid, start, end)."""
    found = []
    for path in markers.glob("calls-*.log"):
        for line in path.read_text().splitlines():
            tag, pid, start, end = line.split()
            found.append((tag, int(pid), float(start), float(end)))
    return found


def max_overlap(spans: list[tuple[float, float]]) -> int:
    """The most calls in flight at one instant (an end before a start at a tie)."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    now = most = 0
    for _, delta in events:
        now += delta
        most = max(most, now)
    return most


def statuses(database_url: str, run_ids: list[str]) -> dict[str, str]:
    rows = sql(
        database_url, "SELECT run_id, status FROM helix.runs WHERE run_id = ANY(%s)", run_ids
    )
    return dict(rows)


def all_completed(database_url: str, run_ids: list[str]) -> bool:
    return set(statuses(database_url, run_ids).values()) == {"completed"}


def start_workers(database_url: str, markers: Path, env: dict[str, str], n: int = 2) -> list:
    workers = [spawn("serve", database_url, markers, env) for _ in range(n)]
    for worker in workers:
        assert "ready" in started(worker)
    return workers


def test_a_limit_of_two_concurrent_calls_holds_across_two_workers(database_url, tmp_path):
    env = {"LIMITS_MAX_CONCURRENT": "2", "LIMITS_WORKER_CONCURRENCY": "10"}

    def slots() -> list[tuple]:
        return sql(
            database_url,
            "SELECT status, queue_partition_key, count(*) FROM dbos.workflow_status "
            "WHERE queue_name = %s GROUP BY 1, 2",
            model_limits.model_queue("mock"),
        )

    workers = start_workers(database_url, tmp_path, env)
    try:
        runs = front(database_url, tmp_path, env | {"LIMITS_RUNS": "-:20"})
        run_ids = [r["run_id"] for r in runs]
        wait_for(lambda: all_completed(database_url, run_ids), timeout=180)
        # A slot ends once its run has freed it: just after the run's end, at times.
        wait_for(lambda: slots() == [("SUCCESS", "default", 20)])
    finally:
        stop(*workers)
    made = calls(tmp_path)
    assert sorted(c[0] for c in made) == sorted(f"--{i}" for i in range(20)), "one call per run"
    assert len({c[1] for c in made}) == 2, "both workers made calls"
    assert max_overlap([(c[2], c[3]) for c in made]) <= 2, "never three calls at once"
    assert slots() == [("SUCCESS", "default", 20)], "a slot per call, in the default tenant"
    assert sql(
        database_url,
        "SELECT count(*) FROM helix.runs WHERE run_id = ANY(%s) AND queued_for IS NOT NULL",
        run_ids,
    ) == [(0,)]


def test_a_small_tenant_progresses_while_a_big_one_has_a_backlog(database_url, tmp_path):
    env = {"LIMITS_MAX_CONCURRENT": "2", "LIMITS_CALL_SECONDS": "0.1"}
    workers = start_workers(database_url, tmp_path, env)
    try:
        runs = front(database_url, tmp_path, env | {"LIMITS_RUNS": "big:50,small:2"})
        run_ids = [r["run_id"] for r in runs]
        wait_for(lambda: all_completed(database_url, run_ids), timeout=300)
    finally:
        stop(*workers)
    by_tenant = sql(
        database_url,
        "SELECT tenant, count(*), max(finished_at) FROM helix.runs "
        "WHERE run_id = ANY(%s) GROUP BY tenant ORDER BY tenant",
        run_ids,
    )
    assert [(t, n) for t, n, _ in by_tenant] == [("big", 50), ("small", 2)]
    small_done = by_tenant[1][2]
    big_after = sql(
        database_url,
        "SELECT count(*) FROM helix.runs WHERE run_id = ANY(%s) AND tenant = 'big' "
        "AND finished_at > %s",
        run_ids,
        small_done,
    )[0][0]
    assert big_after >= 20, f"the small tenant waited for the big one's backlog ({big_after})"
    assert sql(
        database_url,
        "SELECT queue_name, queue_partition_key, count(*) FROM dbos.workflow_status "
        "WHERE workflow_uuid = ANY(%s) GROUP BY 1, 2 ORDER BY 2",
        [f"helix-{r}" for r in run_ids],
    ) == [("limits-runs", "big", 50), ("limits-runs", "small", 2)], "RunQueue by tenant"
    made = calls(tmp_path)
    assert len(made) == 52
    assert max_overlap([(c[2], c[3]) for c in made]) <= 2


def test_runs_waiting_for_a_slot_show_as_queued_and_survive_a_killed_worker(database_url, tmp_path):
    env = {"LIMITS_MAX_CONCURRENT": "1", "LIMITS_WORKER_CONCURRENCY": "2", "LIMITS_HOLD": "1"}
    workers = start_workers(database_url, tmp_path, env)
    survivor = None
    try:
        runs = front(database_url, tmp_path, env | {"LIMITS_RUNS": "acme:4"})
        run_ids = [r["run_id"] for r in runs]

        def queued() -> list[str]:
            rows = sql(
                database_url,
                "SELECT run_id FROM helix.runs WHERE run_id = ANY(%s) AND status = 'running' "
                "AND queued_for = %s",
                run_ids,
                model_limits.model_queue("mock"),
            )
            return [r[0] for r in rows]

        # One call holds the only slot; the other three runs wait for it.
        wait_for(lambda: len(queued()) == 3 and list(tmp_path.glob("begun-*.log")))
        listed = json.loads(run_cli(database_url, "runs", "--status", "queued", "--json").stdout)
        assert sorted(r["run_id"] for r in listed) == sorted(queued())
        assert {r["queued_for"] for r in listed} == {"helix-llm-mock"}
        assert {r["tenant"] for r in listed} == {"acme"}
        table = run_cli(database_url, "runs", "--status", "queued").stdout
        assert "queued (helix-llm-mock)" in table

        # The worker in the middle of the call dies; its runs and its slot go to the other.
        [begun] = list(tmp_path.glob("begun-*.log"))
        holder_pid = int(begun.read_text().split()[1])
        victim = next(w for w in workers if w.pid == holder_pid)
        survivor = next(w for w in workers if w.pid != holder_pid)
        executor_of(database_url, survivor)
        victim.kill()
        victim.wait(timeout=30)
        (tmp_path / "release").touch()
        wait_for(lambda: all_completed(database_url, run_ids), timeout=180)
    finally:
        stop(*workers)
    for run in runs:
        assert sql(
            database_url,
            "SELECT role, count(*) FROM helix.messages WHERE run_id = %s GROUP BY role "
            "ORDER BY role",
            run["run_id"],
        ) == [("assistant", 1), ("user", 1)], "each run answered once"
        assert sql(
            database_url,
            "SELECT count(*) FROM helix.usage WHERE run_id = %s AND kind = 'llm'",
            run["run_id"],
        ) == [(1,)]
    assert queued() == []
    survivor_calls = [c for c in calls(tmp_path) if c[1] == survivor.pid]
    assert len(survivor_calls) >= 3, "the survivor made the calls left"


def test_two_agents_on_one_model_must_agree_on_its_limits():
    a = Agent("a", llm=LLMConfig(model="openai:gpt-4o", max_concurrent=2))
    b = Agent("b", llm=LLMConfig(model="openai:gpt-4o", max_concurrent=3))
    c = Agent("c", llm=LLMConfig(model="openai:gpt-4o", max_concurrent=2))
    assert model_limits.queue_names([a, c, Agent("d")]) == ["helix-llm-openai:gpt-4o"]
    with pytest.raises(AgentDefinitionError, match="other limits on model 'openai:gpt-4o'"):
        model_limits.queue_names([a, b])
    with pytest.raises(AgentDefinitionError, match="rate_limit"):
        LLMConfig(rate_limit=(0, 1.0))
    assert LLMConfig(rate_limit=(5, 1)).limited and not LLMConfig().limited
