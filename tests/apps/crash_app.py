"""A real helix_dbos process for crash tests: started, SIGKILLed, relaunched.

usage: crash_app.py start|recover|run|serve|front DATABASE_URL EXECUTOR_ID SCENARIO MARKER_DIR

EXECUTOR_ID "-" leaves the executor id to helix (unique per process); "serve" launches,
prints {"ready": executor_id} and executes whatever comes its way until killed.
"front" starts a run, interrupts it at once, prints how it ended, then resumes it and
prints how that ended (with CRASH_APP_EXECUTES_RUNS=0, a worker executes both).

The LLM is a function of the transcript, so the relaunched process answers
exactly as the killed one would have. Every tool execution and LLM call is
appended to a file in MARKER_DIR, so the test can count them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from app_marks import marker
from crash_main import once_printed, print_ids
from dbos import DBOS
from pydantic import BaseModel

from helix_dbos import (
    Agent,
    AgentHooks,
    BinaryContent,
    HelixDBOS,
    MockLLM,
    RateLimit,
    RunQueue,
    tool,
)
from helix_dbos.orchestration.types import LLMRequest

mode, database_url, executor_id, scenario, marker_dir = sys.argv[1:6]
if os.environ.get("CRASH_APP_PARK_AFTER"):  # the test waits for `run.parked` on stderr
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("helix_dbos").setLevel(logging.INFO)
markers = Path(marker_dir)


mark = marker(markers)


def first_life() -> bool:
    return mode == "start"


async def die(name: str) -> None:
    """Mark `name` and SIGKILL this process, once the test has the run's ids."""
    await once_printed()
    mark(name)
    os.kill(os.getpid(), signal.SIGKILL)


class Report(BaseModel):
    summary: str


@tool
def record_a(value: str) -> str:
    """Completes at once."""
    mark("record_a.log", value)
    return f"a:{value}"


@tool
async def slow_b(value: str) -> str:
    """Blocks in the first life so the test can kill the process mid-call."""
    mark("slow_b.log", value)
    if scenario == "restart":  # the test restarts PostgreSQL while this call is in flight
        mark("in_slow_b")
        for _ in range(1200):
            if (markers / "release").exists():
                break
            await asyncio.sleep(0.05)
    elif first_life():
        mark("in_slow_b")
        await asyncio.sleep(3600)
    return f"b:{value}"


@tool
def fast(i: int) -> int:
    """One of a parallel batch."""
    mark(f"fast_{i}.log")
    return i


@tool
async def pause() -> str:
    """Takes a second, marking when it begins and ends (queue concurrency tests)."""
    mark("pause.log", f"begin {time.time()}")
    await asyncio.sleep(1.0)
    mark("pause.log", f"end {time.time()}")
    return "paused"


@tool(require_approval=True)
def guarded_delete(path: str) -> str:
    """Needs a human's approval."""
    mark("guarded_delete.log", path)
    return f"deleted {path}"


def respond(request: LLMRequest) -> Any:
    mark("llm.log", str(len(request.messages)))
    if scenario == "pdf":  # the PDF's bytes as this process's model call got them
        parts = [a for m in request.messages for a in m.attachments]
        mark(
            "pdf_seen.log",
            ",".join(hashlib.sha256(getattr(a, "data", b"")).hexdigest() for a in parts),
        )
    if scenario == "written" and first_life() and any(m.role == "tool" for m in request.messages):
        # Step 1's rows were written by this LLM step, which is not checkpointed yet.
        return die("crashed_in_model_call")  # awaited by MockLLM
    if scenario == "early":  # the first life answers at once; a second would run a tool
        if first_life():
            call = {"id": "fin", "name": "__finish__", "arguments": {"summary": "first life"}}
        else:
            call = {"id": "z1", "name": "record_a", "arguments": {"value": "second life"}}
        return {"type": "tool_calls", "tool_calls": [call]}
    results = [m for m in request.messages if m.role == "tool"]
    finish = {
        "id": "fin",
        "name": "__finish__",
        "arguments": {"summary": f"{len(results)} results"},
    }
    if scenario in ("tool", "pdf"):
        plan = [[("t1", "record_a", {"value": "one"})], [("t2", "slow_b", {"value": "two"})]]
    elif scenario == "parallel":
        plan = [
            [
                ("p0", "fast", {"i": 0}),
                ("p1", "fast", {"i": 1}),
                ("p2", "slow_b", {"value": "p"}),
                ("p3", "fast", {"i": 3}),
            ]
        ]
    elif scenario == "restart":
        plan = [[("t1", "record_a", {"value": "one"})], [("t2", "slow_b", {"value": "two"})]]
    elif scenario == "approval":
        plan = [[("g1", "guarded_delete", {"path": "/data/old"})]]
    elif scenario == "queued":
        plan = [[("q1", "pause", {})]]
    else:  # commit, written, final
        plan = [[("t1", "record_a", {"value": "one"})]]
    step = len([m for m in request.messages if m.role == "assistant"])
    if step < len(plan):
        return {
            "type": "tool_calls",
            "tool_calls": [{"id": i, "name": n, "arguments": a} for i, n, a in plan[step]],
        }
    return {"type": "tool_calls", "tool_calls": [finish]}


if scenario == "commit" and first_life():
    from helix_dbos.runtime.steps import commit as step_commit

    original_write = step_commit.write_step_rows

    async def crashing_write(conn, commit, **options):  # type: ignore[no-untyped-def]
        if commit.messages and any(m.role == "tool" for m in commit.messages):
            await die("crashed_before_commit")
        return await original_write(conn, commit, **options)

    step_commit.write_step_rows = crashing_write  # type: ignore[assignment]

if scenario == "open" and first_life():
    from dbos import DBOS as _DBOS

    async def crash_before_start(func, *args, **kwargs):  # type: ignore[no-untyped-def]
        mark("opened", str(args[0]))  # the run's row is committed; its workflow is not started
        os.kill(os.getpid(), signal.SIGKILL)

    _DBOS.start_workflow_async = crash_before_start  # type: ignore[method-assign]

if scenario == "final" and first_life():
    from helix_dbos.runtime.loop import final_write

    original_final = final_write.final_step

    async def crash_after_final(commit, pending, *more):  # type: ignore[no-untyped-def]
        out = await original_final(commit, pending, *more)
        await die("crashed_after_final_commit")  # committed, not yet checkpointed
        return out

    final_write.final_step = crash_after_final  # type: ignore[assignment]

if scenario == "early" and first_life():
    # The run's only LLM step replies with its output; its final write starts before
    # DBOS checkpoints the step (`StepAhead.take`). The test holds that checkpoint
    # with a trigger; this life dies once the final write has committed.
    from helix_dbos.runtime.loop import final_write as early_loop

    original_early_final = early_loop.final_step

    async def crash_after_early_final(commit, pending, *more):  # type: ignore[no-untyped-def]
        out = await original_early_final(commit, pending, *more)
        await die("crashed_after_early_final")  # committed; the LLM step's checkpoint is held
        return out

    early_loop.final_step = crash_after_early_final  # type: ignore[assignment]

if os.environ.get("HELIX_CODE_EDIT"):
    # A code edit between the crash and the relaunch: with DBOS's default (a hash of the
    # workflow source) this process would get a new version and leave the old run alone.
    from dbos import DBOS

    @DBOS.workflow(name="added_after_the_crash")
    async def added_after_the_crash() -> str:
        return "new code"


def marking_hooks() -> AgentHooks:
    """CRASH_APP_HOOKS=1: every hook firing is marked in hooks.log (`name:step:detail`),
    and on_agent_start / after_tool change the state (committed with their steps)."""

    def hook(name: str):  # type: ignore[no-untyped-def]
        def fire(event):  # type: ignore[no-untyped-def]
            call = getattr(event, "call", None)
            message = getattr(event, "message", None)
            detail = call.id if call else (message.role if message else "")
            mark("hooks.log", f"{name}:{event.context.step}:{detail}")
            if name == "on_agent_start":
                event.context.update_state({"after_tool": 0})
            if name == "after_tool":
                event.context.update_state(lambda s: {**s, "after_tool": s["after_tool"] + 1})

        return fire

    names = ["on_agent_start", "before_llm_call", "after_llm_call", "before_tool"]
    names += ["after_tool", "on_message", "on_agent_complete"]
    return AgentHooks(**{n: hook(n) for n in names})


agent = Agent(
    "crash_agent",
    tools=[record_a, slow_b, fast, pause, guarded_delete],
    output_schema=Report,
    hooks=marking_hooks() if os.environ.get("CRASH_APP_HOOKS") else AgentHooks(),
)
with_agent = not os.environ.get("CRASH_APP_WITHOUT_AGENT")
limited = RunQueue(
    "crash-limited",
    [agent],
    concurrency=1,
    partition_by="model",
    per_partition_rate_limit=RateLimit(50, 1.0),
)
if os.environ.get("CRASH_APP_IDLE_SECONDS"):
    # test_workers' idle worker: its pools close what they do not use sooner (helix's
    # statement pool after 30 s, DBOS's after 10 s by default), the same code path.
    from helix_dbos.runtime.process import idle_pool
    from helix_dbos.store import statement_pool

    statement_pool.IDLE_SECONDS = float(os.environ["CRASH_APP_IDLE_SECONDS"])
    idle_pool._IdleTrim.idle_seconds = statement_pool.IDLE_SECONDS
helix = HelixDBOS(
    [agent] if with_agent else [],
    executes_runs=os.environ.get("CRASH_APP_EXECUTES_RUNS", "1") == "1",
    pool_size=int(os.environ.get("CRASH_APP_POOL_SIZE", "10")),
    queues=[limited] if with_agent and os.environ.get("CRASH_APP_QUEUE") else [],
    database_url=database_url,
    llm=MockLLM(respond),
    executor_id=None if executor_id == "-" else executor_id,
    application_version="crash-test",
    reconcile_seconds=float(os.environ.get("CRASH_APP_RECONCILE_SECONDS", "60")),
    # a relaunch under the same id waits for the killed one's lease
    worker_lease_seconds=float(os.environ.get("CRASH_APP_LEASE_SECONDS", "4")),
    # 0: a wait for a human is parked at the next sweep (`wait_parking.py`)
    park_waiting_runs_after_seconds=float(os.environ.get("CRASH_APP_PARK_AFTER", "60")),
)
if os.environ.get("CRASH_APP_SLOW_LAUNCH"):  # DBOS's launch outlasting the fence (2.4 s)
    from dbos import DBOS as _SlowDBOS

    _launch = _SlowDBOS.launch

    def slow_launch() -> None:
        time.sleep(float(os.environ["CRASH_APP_SLOW_LAUNCH"]))
        _launch()

    _SlowDBOS.launch = slow_launch  # type: ignore[method-assign]
if os.environ.get("CRASH_APP_OTEL"):  # every helix span as a JSON line in spans.log
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    from helix_dbos.otel import instrument

    class FileExporter(SpanExporter):
        def export(self, spans):  # type: ignore[no-untyped-def]
            for span in spans:
                parent = span.parent.span_id if span.parent else None
                line = {"name": span.name, "trace": span.context.trace_id}
                line |= {"span": span.context.span_id, "parent": parent, "pid": os.getpid()}
                mark("spans.log", json.dumps(line))
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileExporter()))
    instrument(provider)
helix.launch()


def run_input() -> str | list[str | BinaryContent]:
    """The run's input: with a PDF in the `pdf` scenario (content parts, issue 49)."""
    if scenario != "pdf":
        return f"scenario {scenario}"
    return [f"scenario {scenario}", BinaryContent(data=PDF, media_type="application/pdf")]


#: 256 kB of a PDF, the same in every life of the app.
PDF = b"%PDF-1.7\n" + hashlib.sha256(b"crash").digest() * 8192


async def main() -> None:
    if mode == "run":
        starts = [
            helix.execute(agent, f"scenario {scenario}")
            for _ in range(int(os.environ.get("CRASH_APP_RUNS", "1")))
        ]
        if os.environ.get("CRASH_APP_CONCURRENT_STARTS"):  # a burst: all at once
            handles = await asyncio.wait_for(asyncio.gather(*starts), timeout=60)
        else:
            handles = [await start for start in starts]
        for handle in handles:
            print(
                json.dumps({"run_id": handle.run_id, "session_id": handle.session_id}), flush=True
            )
        for handle in handles:
            result = await handle.result()
            print(
                json.dumps(
                    {"status": result.status, "output": result.output, "error": result.error}
                ),
                flush=True,
            )
    elif mode == "front":
        handle = await helix.execute(agent, f"scenario {scenario}")
        print(json.dumps({"run_id": handle.run_id, "session_id": handle.session_id}), flush=True)
        await helix.interrupt(handle.session_id, reason="stop before it starts")
        print(json.dumps({"interrupted": handle.run_id}), flush=True)
        for resume in (False, True):  # the resume is opened once the first run ended
            if resume:
                handle = await helix.resume(handle.session_id)
            result = await handle.result()
            print(
                json.dumps(
                    {"run_id": handle.run_id, "status": result.status, "error": result.error}
                ),
                flush=True,
            )
    elif mode == "serve":
        print(
            json.dumps({"ready": helix.lease.identity.executor_id if helix.lease else None}),
            flush=True,
        )
        await asyncio.sleep(3600)
    elif mode == "start":
        handle = await helix.execute(agent, run_input())
        print_ids({"run_id": handle.run_id, "session_id": handle.session_id})
        await asyncio.sleep(3600)  # killed by the test (or by itself) before this ends
    else:
        run_id = sys.argv[6]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            run = await helix.get_run(run_id)
            if run.status not in ("running", "waiting"):
                ended: dict[str, object] = {}
                if run.status not in ("paused",):  # its workflow ends a moment after its row
                    with contextlib.suppress(Exception):
                        workflow = await DBOS.retrieve_workflow_async(run.workflow_id)
                        result = await asyncio.wait_for(workflow.get_result(), timeout=30)
                        ended = {"status": result.status, "output": result.output}
                print(
                    json.dumps(
                        {
                            "status": run.status,
                            "output": run.output,
                            "error": run.error,
                            "workflow": ended,
                        }
                    ),
                    flush=True,
                )
                return
            await asyncio.sleep(0.1)
        print(json.dumps({"status": "timeout"}), flush=True)


asyncio.run(main())
helix.shutdown()
