"""What one step's child calls work with, for sub-agents and companions alike."""

from __future__ import annotations

from helix_dbos.definitions.agent import Agent
from helix_dbos.runtime.process.process_runtime import Runtime
from helix_dbos.runtime.steps.commit import StepCommit
from helix_dbos.runtime.steps.workflow_start import AgentWorkflow


class StepChildren:
    """The parent's runtime, agent, step commit and workflow, and its tenant, which
    every child (every turn of a companion) inherits."""

    def __init__(
        self,
        rt: Runtime,
        agent: Agent,
        commit: StepCommit,
        workflow: AgentWorkflow,
        tenant: str | None = None,
    ):
        self.rt = rt
        self.agent = agent
        self.commit = commit
        self.workflow = workflow
        self.tenant = tenant
