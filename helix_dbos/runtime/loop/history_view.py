"""The model's input under the agent's history policy (docs/context.md): the LLM step's
one call into context compaction.

A session that fits its budget costs no walk of its messages and no query; only one that
does not, with an agent that summarises, reads its latest summary (one statement).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from helix_dbos.definitions.agent import Agent
from helix_dbos.llm.windows import context_window
from helix_dbos.orchestration.history.compaction import ModelInput, SummaryRef, compact
from helix_dbos.orchestration.transcript import Transcript
from helix_dbos.runtime.process.process_runtime import Runtime
from helix_dbos.store.features.summaries import latest_summary

#: Output tokens kept free when the agent sets no `max_tokens`.
DEFAULT_OUTPUT_RESERVE = 4096
#: The share of the window the default budget uses: the estimate is not a tokenizer.
WINDOW_MARGIN = 0.9


def history_budget(agent: Agent) -> int | None:
    """The input tokens allowed: the policy's, else the model's known window less its
    output tokens and a margin; None for a model whose window is not known."""
    if agent.history.max_input_tokens is not None:
        return agent.history.max_input_tokens
    window = context_window(agent.llm.model)
    if window is None:
        return None
    reserve = agent.llm.max_tokens or DEFAULT_OUTPUT_RESERVE
    return max(int((window - reserve) * WINDOW_MARGIN), 1)


async def model_input(
    rt: Runtime,
    agent: Agent,
    session_id: str,
    transcript: Transcript,
    fixed: Callable[[], str],
    *,
    may_summarize: bool,
) -> ModelInput:
    """What the model is shown of the transcript; `fixed`: the system prompt and tools as
    text (counted only under a budget). A session that fits its budget is counted from
    the transcript's running total (`Transcript.tokens`): the same cost at message 10
    and at message 1,000."""
    policy = agent.history
    budget = history_budget(agent)
    history = transcript.messages
    if not policy.steps and budget is None:  # the default for models of unknown window
        return ModelInput(history)
    fixed_tokens = policy.counter.count(fixed()) if budget is not None else 0
    counted = transcript.tokens(policy.counter) if not policy.steps else None
    view = functools.partial(
        compact,
        history,
        policy,
        budget=budget,
        fixed_tokens=fixed_tokens,
        cuts=lambda: transcript.cuts.flags,  # built only for a session over its budget
    )
    first = view(may_summarize=False, history_tokens=counted)
    if policy.summarize is None or not first.omitted:
        return first
    row = await rt.on_connection(
        "the summary read", lambda conn: latest_summary(conn, session_id, len(history))
    )
    summary = SummaryRef(row.covers_messages, row.text) if row is not None else None
    return view(summary=summary, may_summarize=may_summarize)
