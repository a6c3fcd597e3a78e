"""The `helix.summary` step: summarise a session's older messages with the agent's model
and write the summary once (`helix.summaries`, migration 0023).

Taken from workflow code only when the LLM step returned `SummaryDue`, so an agent whose
history fits, or that does not summarise, takes exactly the steps it took before. The
row's key is the last covered message: a step run again after a crash between its insert
and its checkpoint inserts nothing, and every later step reads the first text.
"""

from __future__ import annotations

from dataclasses import dataclass

from dbos import StepOptions

from helix_dbos.definitions.agent import LLMConfig
from helix_dbos.llm.pricing import llm_cost_usd
from helix_dbos.orchestration.history.summary_prompt import summary_messages
from helix_dbos.orchestration.types import LLMRequest, Message, TextStepResult
from helix_dbos.runtime.loop.llm_step import is_retryable_llm_error
from helix_dbos.runtime.process.process_runtime import current_runtime
from helix_dbos.store import repository as repo
from helix_dbos.store.features.summaries import (
    NewSummary,
    SummaryRow,
    insert_summary,
    latest_summary,
)
from helix_dbos.store.storable import storable_text

SUMMARY_STEP_NAME = "helix.summary"


@dataclass(frozen=True)
class SummaryMade:
    """The step's output (its checkpoint): which summary exists now, and whether this
    execution wrote it."""

    covers_messages: int
    wrote: bool


class SummaryFailedError(Exception):
    """The model gave no usable summary; the step falls back to dropping old turns."""


def summary_step_options(llm: LLMConfig) -> StepOptions:
    return {
        "name": SUMMARY_STEP_NAME,
        "retries_allowed": True,
        "max_attempts": llm.max_attempts,
        "interval_seconds": llm.retry_interval_seconds,
        "backoff_rate": llm.retry_backoff,
        "should_retry": is_retryable_llm_error,
    }


async def summary_step(
    session_id: str, agent_name: str, run_id: str, step: int, covers_through: int
) -> SummaryMade:
    """Summarise the session's first `covers_through` messages on top of the latest
    summary before them, and write it unless it exists."""
    rt = current_runtime()
    await rt.lease_check()
    agent = rt.agent(agent_name)
    wanted = agent.history.summarize
    if wanted is None:  # the agent's definition changed since the LLM step asked
        raise SummaryFailedError(f"Agent '{agent_name}' no longer summarises its history")
    previous = await rt.on_connection(
        "the summary read", lambda conn: latest_summary(conn, session_id, covers_through)
    )
    if previous is not None and previous.covers_messages == covers_through:
        return SummaryMade(covers_through, wrote=False)  # a replay, or another worker
    rows = await rt.on_connection(
        "the transcript read", lambda conn: repo.load_messages(conn, session_id)
    )
    if len(rows) < covers_through:
        raise SummaryFailedError("the session holds fewer messages than the summary covers")
    start = previous.covers_messages if previous is not None else 0
    covered: list[Message] = [m for _, m in rows[start:covers_through]]
    request = LLMRequest(
        agent_name=agent.name,
        model=agent.llm.model,
        messages=summary_messages(wanted.instructions, previous.text if previous else "", covered),
        temperature=agent.llm.temperature,
        max_tokens=wanted.max_tokens,
        provider_options=dict(agent.llm.provider_options),
    )
    result = await rt.adapter_for(agent).generate_step(request)
    text = result.content.strip() if isinstance(result, TextStepResult) else ""
    if not text:
        raise SummaryFailedError(f"the model gave no summary ({result.type})")
    usage = result.usage
    new = NewSummary(
        session_id=session_id,
        row=SummaryRow(rows[covers_through - 1][0], covers_through, storable_text(text)),
        model=usage.model if usage is not None else None,
        input_tokens=usage.input_tokens if usage is not None else 0,
        output_tokens=usage.output_tokens if usage is not None else 0,
        run_id=run_id,
        step=step,
        agent_name=agent.name,
        cache_read_tokens=usage.cache_read_tokens if usage is not None else 0,
        cache_write_tokens=usage.cache_write_tokens if usage is not None else 0,
        reasoning_tokens=usage.reasoning_tokens if usage is not None else 0,
        cost_usd=llm_cost_usd(usage, agent.llm.provider) if usage is not None else None,
    )
    await rt.on_connection("the summary write", lambda conn: insert_summary(conn, new))
    return SummaryMade(covers_through, wrote=True)
