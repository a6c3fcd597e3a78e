"""Steering (double texting's `steer`): a message sent while a run is live joins that
run's transcript at its next step boundary, before the model call.

The LLM step's first read and each step's write report a waiting steer message in the
same round trip as a pending interrupt (`repository.STEER_PENDING`); only then does
the step take it, in one statement that marks and appends it (`store.session_queue`),
so a retried or recovered step finds it taken and reads it from the transcript.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from helix_dbos.orchestration.transcript import Transcript
from helix_dbos.runtime.process.process_runtime import Runtime
from helix_dbos.store import repository as repo
from helix_dbos.store.features import queued_messages as store


@dataclass(frozen=True)
class Steer:
    """The LLM step's read found a steer message waiting (the state read with it)."""

    state: dict[str, Any]


async def take_steered(
    rt: Runtime, session_id: str, run_id: str, agent_name: str, step: int, state: dict[str, Any]
) -> tuple[Transcript, dict[str, Any]]:
    """Inside the LLM step, before its model call: take the waiting steer messages into
    the transcript (once: a retried step finds them taken) and read it again."""

    async def body(conn: repo.Executor) -> tuple[Transcript, dict[str, Any]]:
        await store.take_steered(
            conn, session_id=session_id, run_id=run_id, agent_name=agent_name, step=step
        )
        history, _ = await rt.history.read(conn, session_id)
        return history, state

    return await rt.on_connection("the steer intake", body)
