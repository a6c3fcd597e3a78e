"""A handle on one run: wait for its result from any loop, sync or async."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dbos import DBOS

from helix_dbos.orchestration.terminating import generated_messages
from helix_dbos.runtime.loop import run_sync
from helix_dbos.runtime.results import AgentResult

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
            handle = await DBOS.retrieve_workflow_async(self.workflow_id)
            out: dict[str, Any] = await handle.get_result()
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
