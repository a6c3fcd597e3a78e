"""The usage-limit check of the LLM step (issue 50): before the model is asked.

Taken only by runs with limits (the agent's `usage_limits`, or `execute(usage_limits=)`)
or with limited ancestors (a sub-agent's or a companion's run started by a limited run,
at any depth: `RunOptions.ancestor_limits`), so a run without them reads nothing more
and checkpoints the same steps. The check runs inside the `helix.llm` step, after the
previous step's rows are written: its answer is part of that step's checkpoint, so a
replay never decides otherwise. One statement reads every tree it needs.
"""

from __future__ import annotations

import logging
from typing import Any

from helix_dbos.definitions.agent import Agent
from helix_dbos.log_events import USAGE_LIMIT, log_event
from helix_dbos.orchestration.next_step import Fail
from helix_dbos.orchestration.usage_limits import (
    USAGE_LIMIT_STOP,
    AncestorLimits,
    LimitBreach,
    TreeUsage,
    UsageLimits,
    breach,
)
from helix_dbos.runtime.process.process_runtime import Runtime
from helix_dbos.runtime.steps.step_types import RunOptions, UsageLimitReached
from helix_dbos.store.tree import trees_usage


def run_limits(agent: Agent, options: RunOptions) -> list[UsageLimits]:
    return [limits for limits in (agent.usage_limits, options.usage_limits) if limits]


def limits_for_children(
    agent: Agent, options: RunOptions, run_id: str
) -> tuple[AncestorLimits, ...]:
    """What this run checks, and every run it starts inherits: its own limits (its
    current agent's and its execute options'), then those it inherited, nearest first."""
    own = tuple(AncestorLimits(run_id, agent.name, limits) for limits in run_limits(agent, options))
    return own + options.ancestor_limits


async def limit_reached(
    rt: Runtime, agent: Agent, options: RunOptions, session_id: str, run_id: str, step: int
) -> UsageLimitReached | None:
    """The first limit reached, if any (one query): the run's own over its tree first,
    then each ancestor's over that ancestor's tree, nearest first."""
    checks = limits_for_children(agent, options, run_id)  # its own, then those above it
    if not checks:
        return None
    usage = await rt.read(trees_usage, [c.run_id for c in checks])
    for check in checks:
        reached = breach(check.limits, usage.get(check.run_id, TreeUsage()))
        if reached is None:
            continue
        inherited = check.run_id != run_id
        message = check.message(reached) if inherited else reached.message
        _log(reached, message, check, session_id, run_id, agent.name, step, inherited)
        return UsageLimitReached(message)
    return None


def _log(
    reached: LimitBreach,
    message: str,
    check: AncestorLimits,
    session_id: str,
    run_id: str,
    agent_name: str,
    step: int,
    inherited: bool,
) -> None:
    extra: dict[str, Any] = (
        {"limit_run_id": check.run_id, "limit_agent": check.agent_name} if inherited else {}
    )
    log_event(
        USAGE_LIMIT,
        logging.WARNING,
        message,
        run_id=run_id,
        session_id=session_id,
        agent_name=agent_name,
        step=step,
        limit=reached.limit,
        allowed=reached.allowed,
        used=reached.used,
        **extra,
    )


def usage_limit_ending(reached: UsageLimitReached) -> Fail:
    """The run's end when its tree reached a limit: failed, `stop_reason="usage_limit"`."""
    return Fail(reached.error, stop_reason=USAGE_LIMIT_STOP)
