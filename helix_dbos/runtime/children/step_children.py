"""What one step's child calls work with, for sub-agents and companions alike."""

from __future__ import annotations

from helix_dbos.definitions.agent import Agent
from helix_dbos.orchestration.usage_limits import AncestorLimits
from helix_dbos.runtime.process.process_runtime import Runtime
from helix_dbos.runtime.steps.commit import StepCommit
from helix_dbos.runtime.steps.step_types import RunOptions
from helix_dbos.runtime.steps.workflow_start import AgentWorkflow


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
