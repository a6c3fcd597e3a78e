"""The usage-limit check of the LLM step (issue 50): before the model is asked.

Taken only by runs with limits (the agent's `usage_limits`, or `execute(usage_limits=)`),
so a run without them reads nothing more and checkpoints the same steps. The check runs
inside the `helix.llm` step, after the previous step's rows are written: its answer is
part of that step's checkpoint, so a replay never decides otherwise.
"""

from __future__ import annotations

import logging

from helix_dbos.definitions.agent import Agent
from helix_dbos.log_events import USAGE_LIMIT, log_event
from helix_dbos.orchestration.next_step import Fail
from helix_dbos.orchestration.usage_limits import USAGE_LIMIT_STOP, UsageLimits, breach
from helix_dbos.runtime.process.process_runtime import Runtime
from helix_dbos.runtime.steps.step_types import RunOptions, UsageLimitReached
from helix_dbos.store.tree import tree_usage


def run_limits(agent: Agent, options: RunOptions) -> list[UsageLimits]:
    return [limits for limits in (agent.usage_limits, options.usage_limits) if limits]


async def limit_reached(
    rt: Runtime, agent: Agent, options: RunOptions, session_id: str, run_id: str, step: int
) -> UsageLimitReached | None:
    """The first limit the run's tree has reached, if any (one query)."""
    limits = run_limits(agent, options)
    if not limits:
        return None
    usage = await rt.read(tree_usage, run_id)
    for each in limits:
        reached = breach(each, usage)
        if reached is not None:
            log_event(
                USAGE_LIMIT,
                logging.WARNING,
                reached.message,
                run_id=run_id,
                session_id=session_id,
                agent_name=agent.name,
                step=step,
                limit=reached.limit,
                allowed=reached.allowed,
                used=reached.used,
            )
            return UsageLimitReached(reached.message)
    return None


def usage_limit_ending(reached: UsageLimitReached) -> Fail:
    """The run's end when its tree reached a limit: failed, `stop_reason="usage_limit"`."""
    return Fail(reached.error, stop_reason=USAGE_LIMIT_STOP)
