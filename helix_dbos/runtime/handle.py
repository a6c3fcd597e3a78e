"""A handle on one run: wait for its result from any loop, sync or async."""

from __future__ import annotations

from typing import Protocol

from dbos import DBOS, WorkflowHandleAsync

from helix_dbos.orchestration.terminating import generated_messages
from helix_dbos.orchestration.types import Message
from helix_dbos.runtime.event_loop import run_sync
from helix_dbos.runtime.results import AgentResult, RunInfo

FINISHING_POLL_SECONDS = 0.01
DURABLE_POLL_SECONDS = 1.0


class RunReader(Protocol):
    """What a handle reads about its run (`HelixDBOS` is one)."""

    async def wait_for_run_end(self, session_id: str, run_id: str) -> RunInfo: ...

    async def get_run(self, run_id: str) -> RunInfo: ...

    async def get_usage(
        self, *, session_id: str | None = None, run_id: str | None = None
    ) -> dict[str, int]: ...

    async def get_run_messages(self, run_id: str) -> list[Message]: ...


class RunHandle:
    def __init__(self, helix: RunReader, session_id: str, run_id: str, workflow_id: str) -> None:
        self._helix = helix
        self.session_id = session_id
        self.run_id = run_id
        self.workflow_id = workflow_id

    def __repr__(self) -> str:
        return f"RunHandle(session_id={self.session_id!r}, run_id={self.run_id!r})"

    async def result(self) -> AgentResult:
        """Wait for the run to end; a cancelled or crashed workflow reads its row instead."""
        in_workflow = DBOS.workflow_id is not None
        try:
            if not in_workflow:
                # Sleep on the run's NOTIFY wake-ups until its row is final; the workflow
                # returns right after, so the short poll below ends almost at once.
                await self._helix.wait_for_run_end(self.session_id, self.run_id)
            poll = DURABLE_POLL_SECONDS if in_workflow else FINISHING_POLL_SECONDS
            handle: WorkflowHandleAsync[AgentResult] = await DBOS.retrieve_workflow_async(
                self.workflow_id
            )
            result = await handle.get_result(polling_interval_sec=poll)
        except Exception:
            result = self._from_row(await self._helix.get_run(self.run_id))
        if in_workflow:
            return result
        update: dict[str, object] = {"usage": await self._helix.get_usage(run_id=self.run_id)}
        if result.terminating:
            messages = await self._helix.get_run_messages(self.run_id)
            update["generated_messages"] = generated_messages(messages)
        return result.model_copy(update=update)

    @staticmethod
    def _from_row(run: RunInfo) -> AgentResult:
        return AgentResult.model_validate(
            {
                "status": run.status,
                "output": run.output,
                "error": run.error,
                "session_id": run.session_id,
                "run_id": run.run_id,
                "step_count": run.step_count,
            }
        )

    def result_sync(self) -> AgentResult:
        return run_sync(self.result)

    async def status(self) -> str:
        return (await self._helix.get_run(self.run_id)).status
