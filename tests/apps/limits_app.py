"""A real helix_dbos process for the model-limit tests (tests/test_limits.py).

usage: limits_app.py serve|front DATABASE_URL MARKER_DIR

"serve" launches a worker, prints {"ready": executor_id} and executes runs until killed.
"front" (a process that executes no runs) starts the runs LIMITS_RUNS lists
(`tenant:count,tenant:count`, a tenant "-" for none), prints one JSON line per run, and
exits: the workers execute them.

The agent's model allows LIMITS_MAX_CONCURRENT calls at once across the fleet. Each call
appends `tag pid start end` to calls-<pid>.log once it returns (and `tag pid start` to
begun-<pid>.log as it begins); with LIMITS_HOLD, a call waits for MARKER_DIR/release.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

from helix_dbos import Agent, HelixDBOS, LLMConfig, MockLLM, RunQueue
from helix_dbos.orchestration.types import LLMRequest

mode, database_url, marker_dir = sys.argv[1:4]
markers = Path(marker_dir)
CALL_SECONDS = float(os.environ.get("LIMITS_CALL_SECONDS", "0.2"))


def append(name: str, line: str) -> None:
    fd = os.open(markers / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        os.write(fd, line.encode() + b"\n")
    finally:
        os.close(fd)


async def respond(request: LLMRequest) -> dict:
    tag = next(m.content for m in request.messages if m.role == "user")
    began = time.time()
    append(f"begun-{os.getpid()}.log", f"{tag} {os.getpid()} {began:.6f}")
    if os.environ.get("LIMITS_HOLD"):
        while not (markers / "release").exists():
            await asyncio.sleep(0.05)
    await asyncio.sleep(CALL_SECONDS)
    append(f"calls-{os.getpid()}.log", f"{tag} {os.getpid()} {began:.6f} {time.time():.6f}")
    return {"type": "text", "content": f"answered {tag}"}


agent = Agent(
    "limited_agent",
    llm=LLMConfig(max_concurrent=int(os.environ.get("LIMITS_MAX_CONCURRENT", "2"))),
)
runs_queue = RunQueue(
    "limits-runs",
    [agent],
    worker_concurrency=int(os.environ.get("LIMITS_WORKER_CONCURRENCY", "30")),
    partition_by="tenant",
    per_partition_concurrency=64,
)
helix = HelixDBOS(
    [agent],
    executes_runs=mode == "serve",
    queues=[runs_queue],
    database_url=database_url,
    llm=MockLLM(respond),
    application_version="limits-test",
    worker_lease_seconds=4.0,
)
helix.launch()


async def main() -> None:
    if mode == "front":
        for spec in os.environ["LIMITS_RUNS"].split(","):
            tenant, count = spec.split(":")
            for i in range(int(count)):
                handle = await helix.execute(
                    agent, f"{tenant}-{i}", tenant=None if tenant == "-" else tenant
                )
                line = {"run_id": handle.run_id, "session_id": handle.session_id}
                print(json.dumps(line | {"tenant": tenant}), flush=True)
        print(json.dumps({"done": True}), flush=True)
    elif mode == "serve":
        ready = helix.lease.identity.executor_id if helix.lease else None
        print(json.dumps({"ready": ready}), flush=True)
        await asyncio.sleep(3600)


try:
    asyncio.run(main())
finally:
    helix.shutdown()
