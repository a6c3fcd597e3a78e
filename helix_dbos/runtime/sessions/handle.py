"""A handle on one run: wait for its result from any loop, sync or async."""

from __future__ import annotations

from typing import Protocol

from dbos import DBOS, WorkflowHandleAsync

from helix_dbos.orchestration.terminating import generated_messages
from helix_dbos.orchestration.types import Message
from helix_dbos.runtime.process.event_loop import run_sync
from helix_dbos.runtime.steps.results import AgentResult, RunInfo, row_result

DURABLE_POLL_SECONDS = 1.0


class RunReader(Protocol):
    """What a handle reads about its run (`HelixDBOS` is one)."""

    async def wait_for_result(
        self, session_id: str, run_id: str, workflow_id: str
    ) -> AgentResult: ...

    async def get_run(self, run_id: str) -> RunInfo: ...

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
        """Wait for the run to end.

        A caller outside a workflow awaits the workflow's task when this process runs
        it, or reads the result from the run's row once the run announces its end (after
        its final write, hooks and span). Workflow code (a sub-agent's parent, an app's
        workflow) waits on the workflow itself, durably; a cancelled or crashed
        workflow reads the row instead.
        """
        if DBOS.workflow_id is None:
            result = await self._helix.wait_for_result(
                self.session_id, self.run_id, self.workflow_id
            )
            if result.terminating:
                messages = await self._helix.get_run_messages(self.run_id)
                result.generated_messages = generated_messages(messages)
            return result
        try:
            handle: WorkflowHandleAsync[AgentResult] = await DBOS.retrieve_workflow_async(
                self.workflow_id
            )
            return await handle.get_result(polling_interval_sec=DURABLE_POLL_SECONDS)
        except Exception:
            return row_result(await self._helix.get_run(self.run_id))

    def result_sync(self) -> AgentResult:
        return run_sync(self.result)

    async def status(self) -> str:
        return (await self._helix.get_run(self.run_id)).status
