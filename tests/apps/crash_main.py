"""The `main()` the crash apps share: "start" starts the agent's run, prints its ids and
sleeps until the test SIGKILLs the process; any other mode is the relaunched process,
which recovers the run: it waits for the run to end and prints what `show` makes of it."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from helix_dbos import Agent, HelixDBOS, RunInfo

# A run in one of these has not ended yet.
LIVE = ("running", "waiting")
LIVE_OR_PAUSED = ("running", "waiting", "paused")

Show = Callable[[RunInfo], dict[str, Any] | Awaitable[dict[str, Any]]]


def outcome(run: RunInfo) -> dict[str, Any]:
    return {"status": run.status, "output": run.output, "error": run.error}


# Set once `start_and_sleep` has printed the run's ids. The run is on DBOS's loop, in
# another thread than `main()`'s, and `execute()` returns after its workflow started: under
# load it can reach the point where an app kills itself before the ids are printed, and
# the test would have none. An app's kill waits for this (`kill_once_printed`); an app
# that prints ids once per turn clears it before each turn.
PRINTED = threading.Event()


def print_ids(ids: dict[str, Any]) -> None:
    """Print a run's ids for the test, then let a kill that waits for them go ahead."""
    print(json.dumps(ids), flush=True)
    PRINTED.set()


async def once_printed() -> None:
    """Wait on an event loop until the run's ids are out."""
    await asyncio.to_thread(PRINTED.wait, 60)


def kill_once_printed() -> None:
    """SIGKILL this process once the run's ids are out (in a thread: a sync tool)."""
    PRINTED.wait(60)
    os.kill(os.getpid(), signal.SIGKILL)


async def kill_once_printed_async() -> None:
    """The same on an event loop (a model's responder: MockLLM awaits what it returns)."""
    await once_printed()
    os.kill(os.getpid(), signal.SIGKILL)


async def start_and_sleep(helix: HelixDBOS, agent: Agent, message: str) -> None:
    handle = await helix.execute(agent, message)
    print_ids({"run_id": handle.run_id, "session_id": handle.session_id})
    await asyncio.sleep(3600)  # killed by the test before this ends


async def wait_for_end(
    helix: HelixDBOS,
    run_id: str,
    *,
    show: Show = outcome,
    seconds: float = 90,
    live: tuple[str, ...] = LIVE,
) -> None:
    """Print `show(run)` once the run leaves `live`, or a timeout after `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        run = await helix.get_run(run_id)
        if run.status not in live:
            shown = show(run)
            if inspect.isawaitable(shown):
                shown = await shown
            print(json.dumps(shown), flush=True)
            return
        await asyncio.sleep(0.1)
    print(json.dumps({"status": "timeout"}), flush=True)


def crash_main(
    helix: HelixDBOS,
    agent: Agent,
    message: str,
    *,
    mode: str,
    run_id_arg: int,
    show: Show = outcome,
    seconds: float = 90,
    live: tuple[str, ...] = LIVE,
) -> None:
    """Run the app's one mode (`sys.argv[run_id_arg]` names the run to recover), then
    shut helix down."""

    async def main() -> None:
        if mode == "start":
            await start_and_sleep(helix, agent, message)
        else:
            run_id = sys.argv[run_id_arg]
            await wait_for_end(helix, run_id, show=show, seconds=seconds, live=live)

    asyncio.run(main())
    helix.shutdown()
