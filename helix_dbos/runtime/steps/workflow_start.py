"""The one way helix starts a run's workflow in this process: for a run a caller starts
(`starts/dispatch.py`, when it does not enqueue it), a sub-agent's child and a
companion's turn (`children/`).

A child starts from its parent's workflow code (DBOS cannot start a workflow from inside
a step); one whose workflow cannot start has its run closed at once, in the
`helix.close_child` transaction, so nothing waits on it. The parent tells the model why.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from dbos import DBOS, SetWorkflowID, WorkflowHandleAsync

from helix_dbos.runtime.process.process_runtime import Runtime
from helix_dbos.runtime.steps.closing import close_run
from helix_dbos.runtime.steps.step_types import RunOptions
from helix_dbos.store import repository as repo

AgentWorkflow = Callable[[str, str, str, RunOptions], Coroutine[Any, Any, Any]]


class Fresh:
    """Set by a step's body when it runs: still unset after DBOS replayed the step from
    its checkpoint (a recovery), so workflow code says what the step found only once."""

    def __init__(self) -> None:
        self.ran = False


@dataclass(frozen=True)
class StartFailed:
    """A child's workflow did not start: why, and whether this attempt closed its run
    (False when DBOS replayed the close from its checkpoint: it was logged then)."""

    reason: str
    closed_now: bool


async def start_workflow(
    workflow: AgentWorkflow,
    workflow_id: str,
    run_id: str,
    session_id: str,
    agent_name: str,
    options: RunOptions,
) -> WorkflowHandleAsync[Any]:
    """Start the run's workflow under `workflow_id` (an id derived from the run, so a
    second start of the same run is the same workflow)."""
    with SetWorkflowID(workflow_id):
        return await DBOS.start_workflow_async(workflow, run_id, session_id, agent_name, options)


async def start_child(
    rt: Runtime,
    workflow: AgentWorkflow,
    workflow_id: str,
    run_id: str,
    session_id: str,
    agent_name: str,
    options: RunOptions,
) -> StartFailed | None:
    """Start a child's workflow from its parent's workflow code, or close its run."""
    try:
        await start_workflow(workflow, workflow_id, run_id, session_id, agent_name, options)
    except Exception as exc:  # its run is closed, so nothing waits on it
        reason = f"its workflow could not be started: {exc}"
        closing = Fresh()
        await rt.transaction("helix.close_child", close_child, session_id, run_id, reason, closing)
        return StartFailed(reason, closing.ran)
    return None


async def close_child(
    session: repo.SQLConnection, session_id: str, run_id: str, reason: str, fresh: Fresh
) -> None:
    """The body of `helix.close_child`: a child whose workflow could not start fails."""
    fresh.ran = True
    await close_run(session, session_id, run_id, reason)
