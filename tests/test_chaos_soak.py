"""A bounded chaos soak: concurrent runs, SIGKILLed workers, answers from another process.

Runs (tests/apps/soak_app.py) take parallel async and sync tools, one of which changes state,
wait for approvals and client tools answered by a separate process with a plain
`DBOSClient.send` (a quarter of the answers sent twice), and complete with a finish_with
tool or the injected `__finish__`; the model takes up to 0.8 s, so kills land in model
calls too. A fleet of workers (two by default, 3 s leases) is SIGKILLed at random moments,
one at a time; each relaunch alternates between the two recovery paths a user has: the
same executor id (it waits for the killed one's lease and takes its runs back) and a
fresh one (a live worker claims the dead one once its lease lapses and its runs come
back through the agents' queues). New runs start in every life, so kills land in every
phase of a run. A worker that fences itself (exit 75) is started again.

One run in six is interrupted while it waits, by a raw `{"interrupt": true}` from the
answering process. Then, with plain SQL and the marker log: every run is terminal, ended
as scripted (completed or interrupted), and its status matches its DBOS workflow; every
transcript is exactly the scripted one (no duplicate, no unpaired tool call); one LLM
usage row per step and one usage row per executed call; one terminal chunk per run;
every answer applied once; and no tool or LLM step that DBOS had checkpointed ran again,
nor one step in two processes at once.

CI runs a short version (6 runs, 3 kills, 2 workers: well under a minute). A longer one:
    HELIX_SOAK_RUNS=120 HELIX_SOAK_KILLS=24 pytest -s tests/test_chaos_soak.py
(HELIX_SOAK_WORKERS sets the fleet's size, HELIX_SOAK_SEED replays a schedule of kills,
HELIX_SOAK_LEASE the lease in seconds; the figures are printed.)
"""

from __future__ import annotations

import json
import os
import random
import selectors
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import forkserver
import psycopg
import pytest
import soak_app
from helpers import sql

APP = Path(__file__).parent / "apps" / "soak_app.py"

RUNS = int(os.environ.get("HELIX_SOAK_RUNS", "6"))
KILLS = int(os.environ.get("HELIX_SOAK_KILLS", "3"))
WORKERS = int(os.environ.get("HELIX_SOAK_WORKERS", "2"))
LIVE = ("running", "waiting", "paused")
DBOS_TERMINAL = ("SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED")
# helix.runs.status -> the DBOS workflow statuses it may end with (runtime/steps/closing.py and
# HelixDBOS.reconcile_runs: a workflow that returned, failed or was cancelled).
MATCHING_WORKFLOW = {
    "completed": {"SUCCESS"},
    "failed": {"SUCCESS", "ERROR", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"},
    "interrupted": {"SUCCESS"},
    "aborted": {"CANCELLED"},
}
TERMINAL_CHUNKS = ("run_completed", "run_failed", "run_interrupted", "run_aborted")


class Worker:
    """One life of the soak's worker process."""

    def __init__(
        self, database_url: str, executor: str, markers: Path, life: int, first: int, count: int
    ) -> None:
        self.executor, self.life = executor, life
        self.proc = forkserver.Popen(
            [
                sys.executable,
                str(APP),
                "serve",
                database_url,
                executor,
                str(markers),
                str(life),
                str(first),
                str(count),
            ],
            stdout=subprocess.PIPE,
            stderr=open(markers / f"life{life}.err", "w"),  # noqa: SIM115 (the child owns it)
            text=True,
        )
        self.runs: list[tuple[int, str, str]] = []
        self.ended_at: float | None = None  # when the test killed it (None: it exited)
        self.exit_code: int | None = None

    def wait_started(self, timeout: float = 120.0) -> bool:
        """Launched and every run of this life started (none is cut off between its
        opening and its workflow's start: that path has its own crash test). False if the
        worker exited before it printed its runs (it fenced itself, or the shared server
        refused it a connection)."""
        assert self.proc.stdout is not None
        selector = selectors.DefaultSelector()
        selector.register(self.proc.stdout, selectors.EVENT_READ)
        ready = selector.select(timeout)
        selector.close()
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            assert ready, f"life {self.life} did not start in {timeout}s"
            self.exit_code = self.proc.wait(timeout=30)
            return False
        started = json.loads(line)
        assert started["executor_id"] == self.executor
        self.runs = [tuple(r) for r in started["started"]]
        return True

    def kill(self) -> str:
        """SIGKILL; returns how the life ended ('killed', or 'exited N' if it was gone)."""
        code = self.proc.poll()
        if code is not None:
            return f"exited {code}"
        self.proc.kill()
        self.proc.wait(timeout=30)
        self.ended_at = time.time()
        return "killed"


def q(database_url: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    """helpers.sql, waiting out a server that is out of connections for a while (the
    soak shares it with whatever else runs)."""
    for attempt in range(30):
        try:
            return sql(database_url, query, *params)
        except psycopg.OperationalError:
            if attempt == 29:
                raise
            time.sleep(1)
    raise AssertionError("unreachable")


def split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


@pytest.mark.crash
def test_chaos_soak(database_url, tmp_path):
    seed = int(os.environ.get("HELIX_SOAK_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    token = uuid.uuid4().hex[:6]
    figures: dict[str, Any] = {"seed": seed, "runs": RUNS, "workers": WORKERS}
    began = time.monotonic()
    batches = iter(split(RUNS, WORKERS + KILLS))
    lives: list[Worker] = []
    next_run = 0
    answerer: subprocess.Popen | None = None
    endings: Counter[str] = Counter()

    def launch(executor: str, count: int) -> Worker:
        """A worker that starts runs next_run..next_run+count-1; started again if it
        exited before it started any (it starts runs only after its first heartbeat)."""
        nonlocal next_run
        batch = [f"soak run {i}" for i in range(next_run, next_run + count)]
        for _ in range(5):
            worker = Worker(database_url, executor, tmp_path, len(lives), next_run, count)
            lives.append(worker)
            if worker.wait_started():
                next_run += count
                return worker
            endings[f"exited {worker.exit_code} before starting runs"] += 1
            migrated = q(database_url, "SELECT to_regclass('helix.messages') IS NOT NULL")
            opened = (
                migrated[0][0]
                and q(
                    database_url,
                    "SELECT count(*) FROM helix.messages WHERE role = 'user' AND content = ANY(%s)",
                    batch,
                )[0][0]
            )
            err = (tmp_path / f"life{worker.life}.err").read_text()[-3000:]
            assert opened == 0, f"life {worker.life} died while starting runs:\n{err}"
        raise AssertionError(f"no worker could start: {err}")

    try:
        fleet = [launch(f"soak-{token}-{slot}", next(batches)) for slot in range(WORKERS)]
        answerer = forkserver.Popen(
            [sys.executable, str(APP), "answer", database_url, str(tmp_path), str(seed)],
            stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / "answerer.err", "w"),  # noqa: SIM115
        )
        for kill in range(KILLS):
            time.sleep(rng.uniform(0.1, 2.5))  # a random moment
            slot = rng.randrange(WORKERS)
            endings[fleet[slot].kill()] += 1
            # Alternate the two recovery paths: the same executor id, then a fresh one.
            executor = fleet[slot].executor if kill % 2 == 0 else f"soak-{token}-{len(lives)}"
            fleet[slot] = launch(executor, next(batches))
        runs = [r for w in lives for r in w.runs]
        assert sorted(r[0] for r in runs) == list(range(RUNS))
        run_ids = [r[1] for r in runs]

        # The fleet finishes everything (a worker that fenced itself is started again).
        deadline = time.monotonic() + 120 + 2 * RUNS
        while not all_ended(database_url, run_ids):
            assert time.monotonic() < deadline, stuck_report(database_url, run_ids)
            for slot, worker in enumerate(fleet):
                if worker.proc.poll() is not None:
                    endings[worker.kill()] += 1
                    fleet[slot] = launch(f"soak-{token}-{len(lives)}", 0)
            time.sleep(0.25)
    finally:
        (tmp_path / "stop").touch()
        if answerer is not None:
            try:
                answerer.wait(timeout=30)
            except subprocess.TimeoutExpired:
                answerer.kill()
                answerer.wait(timeout=30)
        for worker in lives:
            if worker.proc.poll() is None:
                worker.kill()
    assert answerer.returncode == 0, (tmp_path / "answerer.err").read_text()[-2000:]
    figures["wall_seconds"] = round(time.monotonic() - began, 1)
    figures["kills"] = endings["killed"]
    figures["self_exits"] = {k: v for k, v in endings.items() if k != "killed"}
    figures["lives"] = len(lives)

    # Both recovery paths ran: a dead executor id was claimed by a worker under a new id.
    workers = q(
        database_url,
        "SELECT executor_id, state, recovered_by, recovered_runs FROM helix.workers "
        "WHERE executor_id LIKE %s",
        f"soak-{token}-%",
    )
    claimed = [w for w in workers if w[1] == "dead" and w[2] is not None]
    figures["executor_ids"] = len(workers)
    figures["dead_workers_claimed"] = len(claimed)
    figures["runs_handed_back_by_claims"] = sum(w[3] for w in claimed)
    if KILLS >= 2 or (KILLS and WORKERS > 1):
        assert claimed, workers

    # Nothing of the soak's application is left running or queued in DBOS.
    figures["workflows_not_ended"] = q(
        database_url,
        "SELECT count(*) FROM dbos.workflow_status WHERE application_version = %s "
        "AND status <> ALL(%s)",
        soak_app.APP_VERSION,
        list(DBOS_TERMINAL),
    )[0][0]
    assert figures["workflows_not_ended"] == 0

    by_index = {index: (run_id, session_id) for index, run_id, session_id in runs}
    check_statuses(database_url, by_index, figures)
    check_transcripts(database_url, by_index, tmp_path, figures)
    check_usage_and_chunks(database_url, by_index, figures)
    killed_at = {w.life: w.ended_at for w in lives}
    check_no_completed_step_ran_again(database_url, run_ids, tmp_path, killed_at, figures)
    print("\nchaos soak:", json.dumps(figures, sort_keys=True))

    assert figures["kills"] >= 1
    assert figures["status_mismatches"] == 0
    assert figures["duplicate_messages"] == 0
    assert figures["unpaired_tool_calls"] == 0
    assert figures["duplicate_usage_rows"] == 0
    assert figures["duplicate_terminal_chunks"] == 0
    assert figures["completed_tool_steps_rerun"] == 0
    assert figures["completed_llm_steps_rerun"] == 0


# --- waiting --------------------------------------------------------------------------


def all_ended(database_url: str, run_ids: list[str]) -> bool:
    """Every run closed in helix.runs and its workflow ended in DBOS."""
    rows = q(
        database_url,
        "SELECT count(*) FILTER (WHERE r.status = ANY(%s) OR w.status IS NULL "
        "OR w.status <> ALL(%s)) FROM helix.runs r "
        "LEFT JOIN dbos.workflow_status w ON w.workflow_uuid = r.workflow_id "
        "WHERE r.run_id = ANY(%s)",
        list(LIVE),
        list(DBOS_TERMINAL),
        run_ids,
    )
    return rows[0][0] == 0


def stuck_report(database_url: str, run_ids: list[str]) -> str:
    rows = q(
        database_url,
        "SELECT r.run_id, r.status, r.waiting_for, r.step_count, w.status, w.executor_id, "
        "w.queue_name FROM helix.runs r "
        "LEFT JOIN dbos.workflow_status w ON w.workflow_uuid = r.workflow_id "
        "WHERE r.run_id = ANY(%s) AND (r.status = ANY(%s) OR w.status <> ALL(%s))",
        run_ids,
        list(LIVE),
        list(DBOS_TERMINAL),
    )
    workers = q(
        database_url,
        "SELECT executor_id, state, recovered_by, recovered_runs, "
        "now() - heartbeat_at FROM helix.workers ORDER BY started_at",
    )
    return f"runs not ended: {rows}\nworkers: {workers}"


# --- the invariants -------------------------------------------------------------------


def check_statuses(
    database_url: str, by_index: dict[int, tuple[str, str]], figures: dict[str, Any]
) -> None:
    """Each run ended as scripted, and as its workflow and its session say."""
    run_ids = [r for r, _ in by_index.values()]
    rows = q(
        database_url,
        "SELECT r.run_id, r.status, w.status, s.status, r.error FROM helix.runs r "
        "JOIN helix.sessions s USING (session_id) "
        "LEFT JOIN dbos.workflow_status w ON w.workflow_uuid = r.workflow_id "
        "WHERE r.run_id = ANY(%s)",
        run_ids,
    )
    assert len(rows) == len(run_ids)
    figures["run_statuses"] = dict(Counter(r[1] for r in rows))
    mismatches = [r for r in rows if r[2] not in MATCHING_WORKFLOW.get(r[1], set()) or r[3] != r[1]]
    figures["status_mismatches"] = len(mismatches)
    assert not mismatches, mismatches
    by_run = {run_id: index for index, (run_id, _) in by_index.items()}
    unexpected = [r for r in rows if r[1] != expected_run(by_run[r[0]])["status"]]
    assert not unexpected, f"every run ends as scripted: {unexpected}"


def expected_run(index: int) -> dict[str, Any]:
    """The status, transcript, output and usage that the script (soak_app.plan_for)
    leads to. An interrupted run ends after its wait step: its human calls are paired
    with 'Interrupted: soak' (not run, no usage row), its plain calls ran before."""
    messages: list[tuple[str, str | None, str | None, bool]] = [("user", None, None, False)]
    usage: list[tuple[int, str, str | None]] = []
    tally = results = errors = 0
    steps = soak_app.plan_for(index)
    for step, calls in enumerate(steps, start=1):
        messages.append(("assistant", None, None, False))
        usage.append((step, "llm", None))
        human = [c for c in calls if c["name"] in ("guarded", "locate")]
        stopped = bool(human) and soak_app.interrupted(index)
        for call in calls:
            name, arguments = call["name"], call["arguments"]
            failed = (name == "guarded" and not soak_app.approves(arguments["path"])) or (
                name == "locate" and "error" in soak_app.client_answer(arguments["city"])
            )
            if stopped and call in human:
                messages.append(("tool", call["id"], name, True))
                continue
            messages.append(("tool", call["id"], name, failed))
            results += 1
            errors += failed
            if name == "tally":
                tally += arguments["n"]
            if name == "locate":
                usage.append((step, "client_tool_wait_ms", call["id"]))
            elif not failed:
                usage.append((step, "tool", call["id"]))
        if stopped:
            return {
                "status": "interrupted",
                "messages": messages,
                "output": None,
                "usage": usage,
                "steps": step,
            }
    assert not soak_app.interrupted(index), "an interrupted run has a wait step"
    last = len(steps) + 1
    finals = soak_app.final_calls(index, last, results, errors)
    messages.append(("assistant", None, None, False))
    usage.append((last, "llm", None))
    for call in finals:
        messages.append(("tool", call["id"], call["name"], False))
        if call["name"] != "__finish__":
            usage.append((last, "tool", call["id"]))
    summary = f"{results} results, {errors} errors"
    if soak_app.agent_of(index) == soak_app.SCHEMA:
        output: Any = {"summary": summary, "results": results}
    else:
        output = {"answer": summary, "tally": tally}
    return {
        "status": "completed",
        "messages": messages,
        "output": output,
        "usage": usage,
        "steps": last,
    }


def check_transcripts(
    database_url: str, by_index: dict[int, tuple[str, str]], markers: Path, figures: dict[str, Any]
) -> None:
    """Each transcript is exactly the scripted one: so no message is doubled or lost and
    every tool call has exactly one result. The generic SQL checks below say the same
    without the script, as a user would check it."""
    session_ids = [s for _, s in by_index.values()]
    for index, (run_id, session_id) in by_index.items():
        expected = expected_run(index)
        rows = q(
            database_url,
            "SELECT seq, role, tool_call_id, tool_name, is_error FROM helix.messages "
            "WHERE session_id = %s ORDER BY seq",
            session_id,
        )
        assert [r[0] for r in rows] == list(range(1, len(rows) + 1)), (index, rows)
        assert [tuple(r[1:]) for r in rows] == expected["messages"], (index, run_id, rows)
        output, step_count = q(
            database_url, "SELECT output, step_count FROM helix.runs WHERE run_id = %s", run_id
        )[0]
        assert output == expected["output"], (index, run_id, output)
        assert step_count == expected["steps"], (index, run_id, step_count)

    duplicates = q(
        database_url,
        """
        SELECT count(*) FROM (
            SELECT session_id, role, tool_call_id FROM helix.messages
            WHERE session_id = ANY(%s) AND role = 'tool'
            GROUP BY session_id, role, tool_call_id HAVING count(*) > 1
            UNION ALL
            SELECT session_id, role, coalesce(content, tool_calls::text) FROM helix.messages
            WHERE session_id = ANY(%s) AND role IN ('user', 'assistant')
            GROUP BY session_id, role, coalesce(content, tool_calls::text) HAVING count(*) > 1
        ) d
        """,
        session_ids,
        session_ids,
    )[0][0]
    figures["duplicate_messages"] = duplicates
    unpaired = q(
        database_url,
        """
        WITH calls AS (
            SELECT m.session_id, c ->> 'id' AS id FROM helix.messages m,
                jsonb_array_elements(m.tool_calls) c
            WHERE m.session_id = ANY(%s) AND m.role = 'assistant'
        ), results AS (
            SELECT session_id, tool_call_id AS id, count(*) AS n FROM helix.messages
            WHERE session_id = ANY(%s) AND role = 'tool' GROUP BY 1, 2
        )
        SELECT count(*) FROM calls FULL JOIN results USING (session_id, id)
        WHERE calls.id IS NULL OR results.id IS NULL OR results.n <> 1
        """,
        session_ids,
        session_ids,
    )[0][0]
    figures["unpaired_tool_calls"] = unpaired
    figures["tool_calls"] = q(
        database_url,
        "SELECT count(*) FROM helix.messages m, jsonb_array_elements(m.tool_calls) c "
        "WHERE m.session_id = ANY(%s)",
        session_ids,
    )[0][0]

    # Every human answer was applied once, however often it was sent.
    answers = [json.loads(line) for line in (markers / "answers.log").read_text().splitlines()]
    calls = q(
        database_url,
        "SELECT run_id, tool_call_id, kind, status FROM helix.tool_calls WHERE run_id = ANY(%s)",
        [r for r, _ in by_index.values()],
    )
    assert sorted((a["run"], a["call"]) for a in answers) == sorted((c[0], c[1]) for c in calls)
    assert all(
        c[3] in ("approved", "denied", "completed", "failed", "interrupted") for c in calls
    ), calls
    interrupted = {(a["run"], a["call"]) for a in answers if a["topic"] == "interrupt"}
    assert interrupted == {(c[0], c[1]) for c in calls if c[3] == "interrupted"}
    figures["answers"] = len(answers)
    figures["answers_sent_twice"] = sum(1 for a in answers if a["copies"] == 2)


def check_usage_and_chunks(
    database_url: str, by_index: dict[int, tuple[str, str]], figures: dict[str, Any]
) -> None:
    run_ids = [r for r, _ in by_index.values()]
    for index, (run_id, _) in by_index.items():
        rows = q(
            database_url,
            "SELECT step, kind, usage_id FROM helix.usage WHERE run_id = %s",
            run_id,
        )
        got = sorted(
            (
                (step, kind, None if kind == "llm" else usage_id.rsplit(":", 1)[-1])
                for step, kind, usage_id in rows
            ),
            key=str,
        )
        assert got == sorted(expected_run(index)["usage"], key=str), (index, run_id, got)
    figures["duplicate_usage_rows"] = q(
        database_url,
        "SELECT count(*) FROM (SELECT run_id, step, kind, tool_name, "
        "CASE WHEN kind = 'llm' THEN '' ELSE split_part(usage_id, ':', 4) END "
        "FROM helix.usage WHERE run_id = ANY(%s) GROUP BY 1, 2, 3, 4, 5 HAVING count(*) > 1) d",
        run_ids,
    )[0][0]
    terminal = dict(
        q(
            database_url,
            "SELECT run_id, count(*) FROM helix.stream_events "
            "WHERE run_id = ANY(%s) AND type = ANY(%s) GROUP BY run_id",
            run_ids,
            list(TERMINAL_CHUNKS),
        )
    )
    figures["runs_without_terminal_chunk"] = sum(1 for r in run_ids if r not in terminal)
    figures["duplicate_terminal_chunks"] = sum(n - 1 for n in terminal.values())
    assert figures["runs_without_terminal_chunk"] == 0
    tool_ends = q(
        database_url,
        "SELECT run_id, payload ->> 'tool_call_id', count(*) FROM helix.stream_events "
        "WHERE run_id = ANY(%s) AND type = 'tool_end' GROUP BY 1, 2",
        run_ids,
    )
    assert all(n == 1 for _, _, n in tool_ends), [t for t in tool_ends if t[2] != 1]
    starts = q(
        database_url,
        "SELECT count(*) FROM helix.stream_chunks WHERE run_id = ANY(%s) AND type = 'run_started'",
        run_ids,
    )[0][0]
    assert starts == len(run_ids)


def check_no_completed_step_ran_again(
    database_url: str,
    run_ids: list[str],
    markers: Path,
    killed_at: dict[int, float | None],
    figures: dict[str, Any],
) -> None:
    events = [json.loads(line) for line in (markers / "events.log").read_text().splitlines()]
    # When each life ended: when the test killed it, or (it exited by itself, say fenced)
    # no earlier than its last line.
    life_ends = {life: at for life, at in killed_at.items() if at is not None}
    for event in events:
        if killed_at.get(event["life"]) is None:
            life_ends[event["life"]] = max(life_ends.get(event["life"], 0.0), event["t"])
    checkpoints = {
        (wf, step): (name, completed_ms)
        for wf, step, name, completed_ms in q(
            database_url,
            "SELECT workflow_uuid, function_id, function_name, completed_at_epoch_ms "
            "FROM dbos.operation_outputs WHERE workflow_uuid = ANY(%s)",
            [f"helix-{r}" for r in run_ids],
        )
    }
    figures.update(count_step_executions(events, checkpoints, life_ends))
    for kind in ("tool", "llm"):
        assert figures[f"{kind}_steps_without_checkpoint"] == 0
        assert figures[f"{kind}_checkpoints_without_execution"] == 0
        assert figures[f"{kind}_steps_checkpointed_without_end"] == 0
        assert figures[f"{kind}_steps_run_by_two_lives_at_once"] == 0
    # A tool step has no DBOS retries; the LLM step's retries (a transient database error
    # after the model call, say) run it again in the same life, before its checkpoint.
    assert figures["tool_steps_run_twice_in_one_life"] == 0


def count_step_executions(
    events: list[dict[str, Any]],
    checkpoints: dict[tuple[str, int], tuple[str, int]],
    life_ends: dict[int, float],
) -> dict[str, int]:
    """What the marker log says about each tool and LLM step, against DBOS's checkpoints
    ((workflow id, step id) -> (step name, completed_at_epoch_ms)).

    An execution logged 'start' (with whether its step's checkpoint already existed) and,
    unless killed, 'end'. One that started with the checkpoint there, or after the
    checkpoint's completion time (the same machine's clock), re-ran a completed step.
    Executions before the checkpoint are the one that made it and the ones a kill cut off
    (or, for the LLM step, a DBOS retry in the same life), each in a life that had ended
    before another life's next execution started (else two processes ran the step at
    once); 'ended_then_rerun' counts those that had ended when killed (between the
    tool's return and its checkpoint's commit)."""
    figures: dict[str, int] = {}
    for kind, start_event, end_event, prefix in (
        ("tool", "start", "end", "helix.tool:"),
        ("llm", "llm", "llm_end", "helix.llm"),
    ):
        ended = {(e["wf"], e["step"], e["life"]) for e in events if e["ev"] == end_event}
        executions: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
        for event in events:
            if event["ev"] == start_event:
                executions[(event["wf"], event["step"])].append(event)
        counts = Counter[str]()
        for key, starts in executions.items():
            if key not in checkpoints:
                counts["without_checkpoint"] += 1
                continue
            name, completed_ms = checkpoints[key]
            expected = prefix + starts[0]["tool"] if kind == "tool" else prefix
            assert name == expected, f"step {key} is {name}, the marker says {expected}"
            after = [s for s in starts if s["checkpointed"] or int(s["t"] * 1000) > completed_ms]
            before = sorted((s for s in starts if s not in after), key=lambda s: s["t"])
            counts["rerun"] += len(after)
            if len({s["life"] for s in before}) != len(before):
                counts["twice_in_one_life"] += 1
            cut_off = before[:-1]  # the last one before the checkpoint made it
            for earlier, later in zip(before[:-1], before[1:], strict=True):
                if earlier["life"] != later["life"] and (
                    life_ends.get(earlier["life"], float("inf")) > later["t"]
                ):
                    counts["two_lives_at_once"] += 1
            counts["interrupted"] += len(cut_off)
            counts["ended_then_rerun"] += sum(
                1 for s in cut_off if (s["wf"], s["step"], s["life"]) in ended
            )
            if not before or (key[0], key[1], before[-1]["life"]) not in ended:
                counts["checkpointed_without_end"] += 1
        never_ran = [
            k for k, (n, _) in checkpoints.items() if n.startswith(prefix) and k not in executions
        ]
        figures[f"{kind}_steps"] = len(executions)
        figures[f"{kind}_executions"] = sum(len(s) for s in executions.values())
        figures[f"completed_{kind}_steps_rerun"] = counts["rerun"]
        figures[f"interrupted_{kind}_steps_rerun"] = counts["interrupted"]
        figures[f"{kind}_steps_without_checkpoint"] = counts["without_checkpoint"]
        figures[f"{kind}_checkpoints_without_execution"] = len(never_ran)
        figures[f"{kind}_steps_run_twice_in_one_life"] = counts["twice_in_one_life"]
        figures[f"{kind}_steps_run_by_two_lives_at_once"] = counts["two_lives_at_once"]
        figures[f"{kind}_steps_ended_then_rerun"] = counts["ended_then_rerun"]
        figures[f"{kind}_steps_checkpointed_without_end"] = counts["checkpointed_without_end"]
    return figures


def test_the_rerun_count_sees_a_completed_step_run_again():
    """The soak's detector on a made-up log: a cut-off execution is a legitimate re-run, a
    start after the checkpoint (or with it already there) is not."""
    wf = "helix-run_x"

    def start(step: int, life: int, t: float, checkpointed: bool = False) -> dict[str, Any]:
        return {
            "ev": "start",
            "wf": wf,
            "step": step,
            "life": life,
            "t": t,
            "tool": "work",
            "checkpointed": checkpointed,
        }

    def end(step: int, life: int) -> dict[str, Any]:
        return {"ev": "end", "wf": wf, "step": step, "life": life, "t": 0.0}

    checkpoints = {(wf, 2): ("helix.tool:work", 10_000), (wf, 3): ("helix.tool:work", 10_000)}
    clean = [
        start(2, 0, 5.0),
        start(2, 1, 9.0),
        end(2, 1),
        start(3, 0, 8.0),
        end(3, 0),
        start(3, 1, 9.5),
        end(3, 1),
    ]
    ends = {0: 8.5, 1: 10.2, 2: 11.0}  # when each life was killed
    figures = count_step_executions(clean, checkpoints, ends)
    assert figures["completed_tool_steps_rerun"] == 0
    assert figures["interrupted_tool_steps_rerun"] == 2
    assert figures["tool_steps_ended_then_rerun"] == 1
    assert figures["tool_steps_checkpointed_without_end"] == 0

    late = [*clean, start(2, 2, 10.5)]
    assert count_step_executions(late, checkpoints, ends)["completed_tool_steps_rerun"] == 1
    flagged = [*clean, start(3, 2, 9.9, checkpointed=True)]
    assert count_step_executions(flagged, checkpoints, ends)["completed_tool_steps_rerun"] == 1
    twice = [*clean, start(2, 1, 9.2)]
    assert count_step_executions(twice, checkpoints, ends)["tool_steps_run_twice_in_one_life"] == 1
    lost = count_step_executions([start(2, 0, 5.0)], {}, ends)
    assert lost["tool_steps_without_checkpoint"] == 1
    overlapping = count_step_executions(clean, checkpoints, {**ends, 0: 9.2})
    assert overlapping["tool_steps_run_by_two_lives_at_once"] == 1, "life 0 still ran at 9.0"
