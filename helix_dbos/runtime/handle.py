"""A handle on one run: wait for its result from any loop, sync or async."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dbos import DBOS

from helix_dbos.orchestration.terminating import generated_messages
from helix_dbos.runtime.event_loop import run_sync
from helix_dbos.runtime.results import AgentResult

FINISHING_POLL_SECONDS = 0.01
DURABLE_POLL_SECONDS = 1.0

if TYPE_CHECKING:
    from helix_dbos.runtime.executor import HelixDBOS


class RunHandle:
    def __init__(self, helix: HelixDBOS, session_id: str, run_id: str, workflow_id: str) -> None:
        self._helix = helix
        self.session_id = session_id
        self.run_id = run_id
        self.workflow_id = workflow_id

    def __repr__(self) -> str:
        return f"RunHandle(session_id={self.session_id!r}, run_id={self.run_id!r})"

    async def result(self) -> AgentResult:
        """Wait for the run to end; a cancelled or crashed workflow reads its row instead."""
        try:
            if DBOS.workflow_id is None:
                # Sleep on the run's NOTIFY wake-ups until its row is final; the workflow
                # returns right after, so the short poll below ends almost at once.
                await self._helix.wait_for_run_end(self.session_id, self.run_id)
            handle = await DBOS.retrieve_workflow_async(self.workflow_id)
            poll = FINISHING_POLL_SECONDS if DBOS.workflow_id is None else DURABLE_POLL_SECONDS
            out: dict[str, Any] = await handle.get_result(polling_interval_sec=poll)
        except Exception:
            run = await self._helix.get_run(self.run_id)
            out = {
                "status": run.status,
                "output": run.output,
                "error": run.error,
                "session_id": run.session_id,
                "run_id": run.run_id,
                "step_count": run.step_count,
            }
        if DBOS.workflow_id is None:
            out = {**out, "usage": await self._helix.get_usage(run_id=self.run_id)}
            if "response" in out:
                out["generated_messages"] = generated_messages(
                    await self._helix.get_run_messages(self.run_id)
                )
        return AgentResult.model_validate(out)

    def result_sync(self) -> AgentResult:
        return run_sync(self.result)

    async def status(self) -> str:
        return (await self._helix.get_run(self.run_id)).status
