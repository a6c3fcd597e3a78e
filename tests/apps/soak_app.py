"""A real helix_dbos process for the chaos soak (tests/test_chaos_soak.py).

usage:
  soak_app.py serve DATABASE_URL EXECUTOR_ID MARKER_DIR LIFE FIRST COUNT
      launch a worker, start runs FIRST..FIRST+COUNT-1, print one JSON line
      {"executor_id", "started": [[index, run_id, session_id], ...]} and work until killed
  soak_app.py answer DATABASE_URL MARKER_DIR SEED
      answer every pending approval and client tool of the soak's runs with a plain
      `DBOSClient.send`, after a random delay, sometimes twice; stop when MARKER_DIR/stop exists

The model is a function of the transcript (the run's index is in its first message, the
step is the number of assistant messages so far), so a relaunched process answers exactly
as the killed one would have. Every tool execution appends a "start" and an "end" line,
and every model call an "llm" and an "llm_end" line, to MARKER_DIR/events.log, with the workflow id, the
DBOS step id, the process's life and the time; a "start" or "llm" line also says whether DBOS had
already checkpointed that step (which would make it a re-run of a completed step).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
from dbos import DBOS, DBOSClient
from pydantic import BaseModel

from helix_dbos import Agent, HelixDBOS, MockLLM, ToolContext, tool
from helix_dbos.orchestration.types import LLMRequest
from helix_dbos.store.database import libpq_url

APP_VERSION = "soak-test"
FINISHER = "soak_finisher"  # completes with a finish_with tool
SCHEMA = "soak_schema"  # completes with the injected __finish__ (output_schema)
AGENTS = (FINISHER, SCHEMA)


# --- the script: what the model asks for, run by run (pure, also used by the test) -----


def agent_of(index: int) -> str:
    return AGENTS[index % 2]


def plan_for(index: int) -> list[list[dict[str, Any]]]:
    """The tool calls of each step but the last, for run `index`: a parallel batch of
    async and sync tools (one may change state), then maybe a step that waits for a
    human and a client together, then maybe another batch."""
    rng = random.Random(index)
    steps: list[list[dict[str, Any]]] = []

    def batch(step: int) -> list[dict[str, Any]]:
        calls = []
        for j in range(rng.randint(2, 5)):
            call_id = f"s{step}c{j}"
            ms = rng.choice([10, 60, 250, 700, 1500])
            if j == 0 and rng.random() < 0.5:
                calls.append(_call(call_id, "tally", n=rng.randint(1, 9)))
            elif rng.random() < 0.35:
                calls.append(_call(call_id, "crunch", n=rng.randint(1, 50), ms=ms))
            else:
                calls.append(_call(call_id, "work", i=j, ms=ms))
        return calls

    steps.append(batch(1))
    if index % 4 != 3:
        step = len(steps) + 1
        human: list[dict[str, Any]] = []
        if index % 4 != 2:
            path = f"/{rng.choice(['tmp', 'data', 'keep'])}/f{index}"
            human.append(_call(f"s{step}g", "guarded", path=path))
        if index % 4 != 1:
            city = rng.choice(["Oslo", "Lima", "Atlantis", "Kyiv"])
            human.append(_call(f"s{step}l", "locate", city=city))
        human.append(_call(f"s{step}w", "work", i=9, ms=rng.choice([10, 400, 1200])))
        steps.append(human)
    if rng.random() < 0.5:
        steps.append(batch(len(steps) + 1))
    return steps


def final_calls(index: int, step: int, results: int, errors: int) -> list[dict[str, Any]]:
    summary = f"{results} results, {errors} errors"
    if agent_of(index) == SCHEMA:
        return [_call(f"s{step}f", "__finish__", summary=summary, results=results)]
    calls = []
    if index % 3 == 0:  # a regular tool in the same step runs before the finish_with tool
        calls.append(_call(f"s{step}w", "work", i=7, ms=300))
    calls.append(_call(f"s{step}f", "submit", answer=summary))
    return calls


def _call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


def interrupted(index: int) -> bool:
    """This run is interrupted from outside while it waits for a human (a raw
    `{"interrupt": true}` on the topics it waits on); its pending calls are paired with
    'Interrupted: <reason>' and it ends `interrupted` after its wait step."""
    return index % 6 == 4


def approves(path: str) -> bool:
    return not path.startswith("/keep")


def client_answer(city: str) -> dict[str, Any]:
    if city == "Atlantis":
        return {"error": "no such city"}
    return {"result": {"city": city, "lat": len(city) * 7}}


# --- markers ---------------------------------------------------------------------------


class Markers:
    """Append-only JSON lines; one `os.write` per line, so no line is torn by a SIGKILL."""

    def __init__(self, path: Path, life: int, database_url: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.life = life
        self.database_url = database_url
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None

    def checkpointed(self, workflow_id: str, step_id: int) -> bool | None:
        """Whether DBOS has a checkpoint for this step already (it must never run then);
        None if the database could not be asked (the soak shares a server: it may be out
        of connections for a while). Never raises: a probe must not fail a tool or the
        model, which would change the run."""
        with self._lock:
            for attempt in range(20):
                try:
                    if self._conn is None or self._conn.closed:
                        self._conn = psycopg.connect(libpq_url(self.database_url), autocommit=True)
                    row = self._conn.execute(
                        "SELECT 1 FROM dbos.operation_outputs "
                        "WHERE workflow_uuid = %s AND function_id = %s",
                        (workflow_id, step_id),
                    ).fetchone()
                    return row is not None
                except psycopg.Error:
                    if self._conn is not None:
                        self._conn.close()
                    self._conn = None
                    time.sleep(min(0.05 * 2**attempt, 1.0))
        return None

    def write(self, event: str, **fields: Any) -> None:
        line = {"ev": event, "life": self.life, "pid": os.getpid(), "t": time.time(), **fields}
        os.write(self.fd, (json.dumps(line) + "\n").encode())


markers: Markers | None = None


def step_started(ctx: ToolContext | None, name: str) -> dict[str, Any]:
    assert markers is not None
    workflow_id, step_id = DBOS.workflow_id, DBOS.step_id
    assert workflow_id is not None and step_id is not None, "a tool runs inside its DBOS step"
    key = {"wf": workflow_id, "step": step_id, "tool": name}
    if ctx is not None:
        key["call"] = ctx.tool_call_id
    markers.write("start", checkpointed=markers.checkpointed(workflow_id, step_id), **key)
    return key


def step_ended(key: dict[str, Any]) -> None:
    assert markers is not None
    markers.write("end", **key)


# --- tools -----------------------------------------------------------------------------


@tool
async def work(i: int, ms: int, ctx: ToolContext) -> str:
    """An async tool that takes a while."""
    key = step_started(ctx, "work")
    await asyncio.sleep(ms / 1000)
    step_ended(key)
    return f"w{i}"


@tool
def crunch(n: int, ms: int, ctx: ToolContext) -> int:
    """A sync tool (runs in a thread) that takes a while."""
    key = step_started(ctx, "crunch")
    time.sleep(ms / 1000)
    step_ended(key)
    return sum(range(n))


@tool
def tally(n: int, ctx: ToolContext) -> int:
    """Adds n to the session's state."""
    key = step_started(ctx, "tally")
    total = int(ctx.get_state().get("tally", 0)) + n
    ctx.update_state({"tally": total})
    step_ended(key)
    return total


@tool(require_approval=True)
def guarded(path: str, ctx: ToolContext) -> str:
    """Needs a human's approval."""
    key = step_started(ctx, "guarded")
    step_ended(key)
    return f"deleted {path}"


@tool(execute="client", client_timeout_seconds=600)
def locate(city: str) -> dict[str, Any]:
    """Executed by the client; its result is sent in from another process."""
    raise AssertionError("a client tool never runs in the worker")


@tool(finish_with=True)
def submit(answer: str, ctx: ToolContext) -> dict[str, Any]:
    """Completes the run with the answer and the state's tally."""
    key = step_started(ctx, "submit")
    output = {"answer": answer, "tally": ctx.get_state().get("tally", 0)}
    step_ended(key)
    return output


class Report(BaseModel):
    summary: str
    results: int


async def respond(request: LLMRequest) -> dict[str, Any]:
    """The model: a function of the transcript, which sometimes takes a while to answer."""
    assert markers is not None
    workflow_id, step_id = DBOS.workflow_id, DBOS.step_id
    assert workflow_id is not None and step_id is not None, "the model runs inside its step"
    key = {"wf": workflow_id, "step": step_id}
    markers.write(
        "llm",
        checkpointed=markers.checkpointed(workflow_id, step_id),
        n=len(request.messages),
        **key,
    )
    first = next(m for m in request.messages if m.role == "user")
    index = int((first.content or "").split()[-1])
    step = 1 + sum(1 for m in request.messages if m.role == "assistant")
    await asyncio.sleep(random.Random(index * 100 + step).choice([0, 0.05, 0.3, 0.8]))
    plan = plan_for(index)
    if step <= len(plan):
        calls = plan[step - 1]
    else:
        results = [m for m in request.messages if m.role == "tool"]
        errors = sum(1 for m in results if m.is_error)
        calls = final_calls(index, step, len(results), errors)
    markers.write("llm_end", **key)
    return {"type": "tool_calls", "tool_calls": calls}


TOOLS = [work, crunch, tally, guarded, locate]
finisher = Agent(FINISHER, tools=[*TOOLS, submit], max_steps=10)
schema = Agent(SCHEMA, tools=TOOLS, output_schema=Report, max_steps=10)


# --- the two modes ---------------------------------------------------------------------


def launch(database_url: str, executor_id: str) -> HelixDBOS:
    helix = HelixDBOS(
        [finisher, schema],
        database_url=database_url,
        llm=MockLLM(respond),
        pool_size=4,  # the soak's workers share one server with whatever else runs
        executor_id=executor_id,
        application_version=APP_VERSION,
        worker_lease_seconds=float(os.environ.get("HELIX_SOAK_LEASE", "3")),
    )
    helix.launch()
    return helix


def wait_for_first_heartbeat(database_url: str, executor_id: str) -> None:
    """Start runs only once the lease was renewed after launch: a launch slower than most
    of the lease makes the worker fence itself at once (see the soak's report), and then
    it must not have opened a run it could not start."""
    with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
        for _ in range(600):
            row = conn.execute(
                "SELECT heartbeat_at > started_at FROM helix.workers WHERE executor_id = %s",
                (executor_id,),
            ).fetchone()
            if row is not None and row[0]:
                return
            time.sleep(0.05)
    raise RuntimeError(f"worker {executor_id} never renewed its lease")


async def serve(helix: HelixDBOS, life: int, first: int, count: int) -> None:
    handles = await asyncio.gather(
        *(helix.execute(agent_of(i), f"soak run {i}") for i in range(first, first + count))
    )
    started = [
        [i, h.run_id, h.session_id]
        for i, h in zip(range(first, first + count), handles, strict=True)
    ]
    print(json.dumps({"executor_id": DBOS.executor_id, "life": life, "started": started}))
    sys.stdout.flush()
    await asyncio.sleep(3600)  # SIGKILLed by the test


TOPICS = {"approval": "helix.approval", "client": "helix.tool_result"}
PENDING = """
SELECT t.run_id, t.tool_call_id, t.workflow_id, t.kind, t.input,
       (SELECT m.content FROM helix.messages m
        WHERE m.run_id = t.run_id AND m.role = 'user' ORDER BY m.seq LIMIT 1)
FROM helix.tool_calls t JOIN helix.runs r USING (run_id)
WHERE t.status = 'pending' AND r.agent_name = ANY(%s)
ORDER BY t.run_id, t.tool_call_id
"""


def reply(kind: str, call_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The answer to one pending call, in the JSON shapes of docs/human-in-the-loop.md."""
    if kind == "client":
        return {"tool_call_id": call_id, **client_answer(arguments["city"])}
    body: dict[str, Any] = {"tool_call_id": call_id, "approved": approves(arguments["path"])}
    if not body["approved"]:
        body["reason"] = "keep it"
    return body


class Answerer:
    """Answers from another process, as any DBOS client would: no helix code involved.
    A database error (the shared server out of connections) is waited out."""

    def __init__(self, database_url: str, marker_dir: Path, seed: int) -> None:
        self.database_url = database_url
        self.rng = random.Random(seed)
        self.client = DBOSClient(system_database_url=libpq_url(database_url))
        self.log = os.open(
            marker_dir / "answers.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644
        )
        self.due: dict[tuple[str, str], float] = {}
        # HELIX_SOAK_LATE_ANSWERS: the share of answers held back 5.5-7 s, past the
        # parking sweep (5 s), so that such a wait is parked for sure (test_db_outage)
        self.late = float(os.environ.get("HELIX_SOAK_LATE_ANSWERS", "0"))
        self.sent: set[tuple[str, str]] = set()
        self.conn: psycopg.Connection[Any] | None = None

    def pending(self) -> list[tuple[Any, ...]]:
        try:
            if self.conn is None or self.conn.closed:
                self.conn = psycopg.connect(libpq_url(self.database_url), autocommit=True)
            return self.conn.execute(PENDING, (list(AGENTS),)).fetchall()
        except psycopg.Error as exc:
            print(f"answerer: {exc}", file=sys.stderr, flush=True)
            self.conn = None
            return []

    def send(self, workflow_id: str, messages: list[tuple[dict[str, Any], str]]) -> bool:
        try:
            for body, topic in messages:
                self.client.send(workflow_id, body, topic)
        except Exception as exc:  # sent again next time: one more copy, applied once
            print(f"answerer: send failed: {exc}", file=sys.stderr, flush=True)
            return False
        return True

    def record(self, run_id: str, call_id: str, topic: str, copies: int) -> None:
        self.sent.add((run_id, call_id))
        line = {"run": run_id, "call": call_id, "topic": topic, "copies": copies}
        os.write(self.log, (json.dumps(line) + "\n").encode())

    def answer_once(self) -> None:
        rows = self.pending()
        now = time.monotonic()
        for run_id, call_id, workflow_id, kind, arguments, first_message in rows:
            if (run_id, call_id) in self.sent:
                continue
            if now < self.due.setdefault((run_id, call_id), now + self.delay()):
                continue
            if interrupted(int(first_message.split()[-1])):
                # One interrupt answers every pending call of the run; it goes on each
                # topic the run waits on, as HelixDBOS.interrupt() sends it: the run
                # collects one kind of answer at a time and reads only that kind's topic.
                calls = [(r[1], r[3]) for r in rows if r[0] == run_id]
                body = {"interrupt": True, "reason": "soak"}
                topics = sorted({TOPICS[k] for _, k in calls})
                if self.send(workflow_id, [(body, t) for t in topics]):
                    for other, _ in calls:
                        self.record(run_id, other, "interrupt", 1)
                continue
            topic = TOPICS[kind]
            copies = 2 if self.rng.random() < 0.25 else 1  # a retried send: applied once
            message = (reply(kind, call_id, arguments), topic)
            if self.send(workflow_id, [message] * copies):
                self.record(run_id, call_id, topic, copies)

    def delay(self) -> float:
        """Seconds before a new wait is answered. With a late share, the first wait is
        always late: with 8 runs and a random quarter, no answer at all was late about
        one time in ten, and no wait was parked (test_fast_restart failed so)."""
        first = not self.due
        if self.late and (first or self.rng.random() < self.late):
            return self.rng.uniform(5.5, 7.0)
        return self.rng.uniform(0, 1.2)

    def run(self, stop: Path) -> None:
        while not stop.exists():
            time.sleep(0.1)
            self.answer_once()
        if self.conn is not None:
            self.conn.close()
        self.client.destroy()


def main() -> None:
    global markers
    mode, database_url = sys.argv[1:3]
    if mode == "answer":
        marker_dir = Path(sys.argv[3])
        Answerer(database_url, marker_dir, int(sys.argv[4])).run(marker_dir / "stop")
        return
    executor_id, marker_dir, life, first, count = sys.argv[3:8]
    markers = Markers(Path(marker_dir) / "events.log", int(life), database_url)
    helix = launch(database_url, executor_id)
    wait_for_first_heartbeat(database_url, executor_id)
    asyncio.run(serve(helix, int(life), int(first), int(count)))


if __name__ == "__main__":
    main()
