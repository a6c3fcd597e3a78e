"""A run followed live on stderr: a line per step, and a spinner saying what happens now.

Lines come from the run's stream (`StepNarrator`), so they show the model's calls, each
tool and each wait for a human (with the command that answers it), whichever process
executes the run. Piped, the lines are plain; `--quiet` drops them.
"""

from __future__ import annotations

import asyncio
from contextlib import nullcontext
from typing import Any

from helix_dbos.cli.output import stderr_console
from helix_dbos.cli.visible import reveal
from helix_dbos.facade.helix import HelixDBOS
from helix_dbos.runtime.sessions.handle import RunHandle
from helix_dbos.runtime.steps.results import AgentResult
from helix_dbos.streaming.chunks import StreamChunk
from helix_dbos.streaming.progress import WAITS, StepNarrator

# How long the stream may lag the result before the follower is dropped.
DRAIN_SECONDS = 5.0


def activity(chunk: StreamChunk) -> str | None:
    """What the run does after this chunk, for the spinner."""
    step = f"step {chunk.step} · " if chunk.step else ""
    if chunk.type == "tool_start":
        return f"{step}running {reveal(str(chunk.payload.get('tool_name'))).plain}"
    if chunk.type in WAITS:
        return f"{step}waiting for {WAITS[chunk.type]}"
    if chunk.type in ("run_started", "run_resumed", "tool_end"):
        return "calling the model"
    if chunk.type == "text_delta":
        return f"{step}the model is writing"
    return None


async def follow(helix: HelixDBOS, handle: RunHandle, *, quiet: bool = False) -> AgentResult:
    """Wait for the run's result while its steps are shown on stderr."""
    console = stderr_console()
    status: Any = (
        console.status("starting the run") if console.is_terminal and not quiet else nullcontext()
    )
    narrator = StepNarrator()

    async def show() -> None:
        async for chunk in helix.stream(handle.session_id, run_id=handle.run_id):
            if quiet:
                continue
            for line in narrator.feed(chunk):
                console.print(reveal(line), soft_wrap=True)
            doing = activity(chunk)
            if doing and spinner is not None:
                spinner.update(doing)
        if not quiet:
            for line in narrator.finish():
                console.print(reveal(line), soft_wrap=True)

    with status as spinner:
        follower = asyncio.create_task(show())
        try:
            result = await handle.result()
        finally:
            done, _ = await asyncio.wait({follower}, timeout=DRAIN_SECONDS)
            if not done:
                follower.cancel()
            elif follower.exception() is not None:  # the lines are a courtesy: say, go on
                console.print(f"(progress stopped: {follower.exception()})")
    return result
