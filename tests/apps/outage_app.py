"""A real helix_dbos worker for the database outage tests (tests/test_db_outage.py).

usage:
  outage_app.py hold DATABASE_URL EXECUTOR_ID MARKER_DIR
      one run whose tool, then whose second model call, each wait for MARKER_DIR/go1 and
      go2 (writing held and model2 when they start waiting), so the test restarts the
      database while that step's rows are in memory, then while the model answers; with
      every pooled connection opened before. Prints the run's result as one JSON line.
  outage_app.py recover DATABASE_URL EXECUTOR_ID MARKER_DIR
      relaunch the hold worker (same executor id): DBOS recovers its pending run; prints
      that run's result as one JSON line.
  outage_app.py serve DATABASE_URL EXECUTOR_ID MARKER_DIR SOAK_RUNS LEAD_RUNS
      launch a worker, start SOAK_RUNS runs of the chaos soak's script
      (tests/apps/soak_app.py: parallel tools, approvals and client tools answered from another
      process) and LEAD_RUNS runs of an agent that delegates to a sub-agent beside a
      plain tool; serve the HTTP API (for the test's SSE readers); print one JSON line
      {"soak": [[index, run_id, session_id], ...], "lead": [[run_id, session_id], ...],
      "url": base_url} and work until killed

Every model call and tool execution writes soak_app's markers (so the test counts
re-run steps and model calls against DBOS's checkpoints).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import live_server
import soak_app
from soak_app import Markers, work

from helix_dbos import Agent, HelixDBOS, MockLLM, ToolContext, sub_agent_tool, tool
from helix_dbos.orchestration.types import LLMRequest
from helix_dbos.runtime.process.event_loop import on_target_loop
from helix_dbos.server.app import create_app
from helix_dbos.store import repository as repo

LEAD = "outage_lead"
CHILD = "outage_child"

child = Agent(CHILD, tools=[work], max_steps=5)
lead = Agent(LEAD, tools=[work, sub_agent_tool(child)], max_steps=5)


def _call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


async def respond(request: LLMRequest) -> dict[str, Any]:
    """The soak's script for its agents; for the lead and its child, a tool step then an
    answer (the lead's tool step runs its child beside a plain tool)."""
    if request.agent_name not in (LEAD, CHILD):
        return await soak_app.respond(request)
    assert soak_app.markers is not None
    from dbos import DBOS  # noqa: PLC0415

    key = {"wf": DBOS.workflow_id, "step": DBOS.step_id}
    checkpointed = soak_app.markers.checkpointed(str(key["wf"]), int(str(key["step"])))
    soak_app.markers.write("llm", checkpointed=checkpointed, n=len(request.messages), **key)
    steps = sum(1 for m in request.messages if m.role == "assistant")
    await asyncio.sleep(0.3)
    soak_app.markers.write("llm_end", **key)
    if steps == 0 and request.agent_name == LEAD:
        return {
            "type": "tool_calls",
            "tool_calls": [
                _call("l1c", f"subagent__{CHILD}", message="look it up"),
                _call("l1w", "work", i=1, ms=700),
            ],
        }
    if steps == 0:
        return {"type": "tool_calls", "tool_calls": [_call("k1w", "work", i=2, ms=400)]}
    return {"type": "text", "content": f"{request.agent_name} done"}


HOLD = "outage_hold"


async def wait_for(marker_dir: Path, name: str) -> None:
    while not (marker_dir / name).exists():
        await asyncio.sleep(0.05)


@tool
async def hold(ctx: ToolContext) -> str:
    """Waits, after the test was told it runs, until the test restarted the database."""
    marker_dir = Path(os.environ["HELIX_OUTAGE_MARKERS"])
    (marker_dir / "held").touch()
    os.write(_calls(marker_dir), b"tool\n")
    await wait_for(marker_dir, "go1")
    return "held"


def _calls(marker_dir: Path) -> int:
    return os.open(marker_dir / "calls.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


async def hold_model(request: LLMRequest) -> dict[str, Any]:
    marker_dir = Path(os.environ["HELIX_OUTAGE_MARKERS"])
    os.write(_calls(marker_dir), b"model\n")
    if not any(m.role == "assistant" for m in request.messages):
        return {"type": "tool_calls", "tool_calls": [_call("h1", "hold")]}
    (marker_dir / "model2").touch()
    await wait_for(marker_dir, "go2")
    return {"type": "text", "content": "all done"}


async def held_run(helix: HelixDBOS) -> None:
    # Every pooled connection open before the restarts: each is a dead one after them.
    # (On DBOS's loop, which the pool belongs to, as every helix read runs.)
    await asyncio.gather(
        *(
            on_target_loop(functools.partial(helix.runtime.read, repo.get_run, f"warm-{i}"))
            for i in range(4 * POOL_SIZE)
        )
    )
    handle = await helix.execute(HOLD, "hold on")
    marker_dir = Path(os.environ["HELIX_OUTAGE_MARKERS"])
    (marker_dir / "run.json").write_text(json.dumps([handle.session_id, handle.run_id]))
    result = await handle.result()
    print(json.dumps({"status": result.status, "error": result.error}), flush=True)


async def recovered_run(helix: HelixDBOS) -> None:
    """The held run, resumed by this process's recovery: its result once it ended."""
    session_id, run_id = json.loads(
        (Path(os.environ["HELIX_OUTAGE_MARKERS"]) / "run.json").read_text()
    )
    run = await helix.wait_for_run_end(session_id, run_id)
    print(json.dumps({"status": run.status, "error": run.error}), flush=True)


async def serve(helix: HelixDBOS, soak_runs: int, lead_runs: int) -> None:
    soak = await asyncio.gather(
        *(helix.execute(soak_app.agent_of(i), f"soak run {i}") for i in range(soak_runs))
    )
    leads = await asyncio.gather(*(helix.execute(LEAD, "delegate") for _ in range(lead_runs)))
    app = create_app(helix, allow_unauthenticated=True, keepalive_seconds=1.0)
    with live_server.serve(app) as base_url:  # the SSE readers are the test's
        started = {
            "soak": [[i, h.run_id, h.session_id] for i, h in enumerate(soak)],
            "lead": [[h.run_id, h.session_id] for h in leads],
            "url": base_url,
        }
        print(json.dumps(started), flush=True)
        await asyncio.sleep(3600)  # stopped by the test


def outage_horizon() -> dict[str, float]:
    """HELIX_OUTAGE_HORIZON, if set (unset: HelixDBOS's default)."""
    horizon = os.environ.get("HELIX_OUTAGE_HORIZON")
    return {"database_outage_seconds": float(horizon)} if horizon else {}


POOL_SIZE = 4
# The worker outlives each restart: its lease (60 s unless HELIX_OUTAGE_LEASE says) is
# long enough that its fence (a worker cut off from the database stops) never trips on a
# slow restart of a loaded machine; a fence that does not exit is another change's.


def main() -> None:
    mode, database_url, executor_id, marker_dir = sys.argv[1:5]
    if os.environ.get("HELIX_OUTAGE_IN_MEMORY"):  # the test looks for `run.parked`
        logging.basicConfig(level=logging.WARNING)
        logging.getLogger("helix_dbos").setLevel(logging.INFO)
    if mode in ("hold", "recover"):
        os.environ["HELIX_OUTAGE_MARKERS"] = marker_dir
        helix = HelixDBOS(
            [Agent(HOLD, tools=[hold])],
            database_url=database_url,
            llm=MockLLM(hold_model),
            pool_size=POOL_SIZE,
            executor_id=executor_id,
            worker_lease_seconds=float(os.environ.get("HELIX_OUTAGE_LEASE", "60")),
            **outage_horizon(),
        )
        helix.launch()
        asyncio.run(held_run(helix) if mode == "hold" else recovered_run(helix))
        return
    soak_runs, lead_runs = sys.argv[5:7]
    soak_app.markers = Markers(Path(marker_dir) / "events.log", 0, database_url)
    helix = HelixDBOS(
        [soak_app.finisher, soak_app.schema, lead, child],
        database_url=database_url,
        llm=MockLLM(respond),
        pool_size=POOL_SIZE,
        executor_id=executor_id,
        application_version=soak_app.APP_VERSION,
        worker_lease_seconds=float(os.environ.get("HELIX_OUTAGE_LEASE", "60")),
        waiting_runs_in_memory=int(os.environ.get("HELIX_OUTAGE_IN_MEMORY", "1000")),
        **outage_horizon(),
    )
    helix.launch()
    soak_app.wait_for_first_heartbeat(database_url, executor_id)
    asyncio.run(serve(helix, int(soak_runs), int(lead_runs)))


if __name__ == "__main__":
    main()
