"""What one step's child calls work with, for sub-agents and companions alike."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from helix_dbos.definitions.agent import Agent
from helix_dbos.orchestration.types import ToolCall
from helix_dbos.orchestration.usage_limits import AncestorLimits
from helix_dbos.runtime.process.process_runtime import Runtime
from helix_dbos.runtime.steps.commit import StepCommit
from helix_dbos.runtime.steps.live_chunks import tool_start_chunk
from helix_dbos.runtime.steps.step_types import RunOptions
from helix_dbos.runtime.steps.workflow_start import AgentWorkflow, StartFailed, start_child
from helix_dbos.store import repository as repo


class ChildToStart(Protocol):
    """A child run whose session and run are open (`subagents.ChildRun`)."""

    @property
    def workflow_id(self) -> str: ...
    @property
    def run_id(self) -> str: ...
    @property
    def session_id(self) -> str: ...
    @property
    def agent_name(self) -> str: ...


class StepChildren:
    """The parent's runtime, agent, step commit and workflow, and its tenant and usage
    limits (its own and its ancestors'), which every child (every turn of a companion)
    inherits."""

    def __init__(
        self,
        rt: Runtime,
        agent: Agent,
        commit: StepCommit,
        workflow: AgentWorkflow,
        tenant: str | None = None,
        ancestor_limits: tuple[AncestorLimits, ...] = (),
    ):
        self.rt = rt
        self.agent = agent
        self.commit = commit
        self.workflow = workflow
        self.tenant = tenant
        self.ancestor_limits = ancestor_limits

    @property
    def hands_down_limits(self) -> bool:
        """Whether the children check usage limits: then the parent's model call that
        asked for them is recorded before they start, so their checks count it."""
        return bool(self.ancestor_limits)

    def child_options(self) -> RunOptions:
        """A child's workflow input: what it inherits from this run."""
        return RunOptions(tenant=self.tenant, ancestor_limits=self.ancestor_limits)

    async def start(self, child: ChildToStart) -> StartFailed | None:
        """Start the child's workflow with what it inherits, or close its run."""
        return await start_child(
            self.rt,
            self.workflow,
            child.workflow_id,
            child.run_id,
            child.session_id,
            child.agent_name,
            self.child_options(),
        )


async def show_calls_started(
    session: repo.SQLConnection, parent: StepCommit, calls: Sequence[ToolCall]
) -> None:
    """The calls' `tool_start` in the parent's stream, first (keyed: the parent step's
    own write of them later is a no-op)."""
    await repo.insert_chunks(
        session,
        parent.session_id,
        parent.run_id,
        parent.agent_name,
        parent.step,
        [tool_start_chunk(parent.run_id, parent.step, call) for call in calls],
    )
