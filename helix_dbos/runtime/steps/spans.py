"""Trace records: what a run, an LLM call and a tool call looked like, for a tracer.

The runtime hands these plain records to a sink (`helix_dbos.otel.instrument` installs
one that makes OpenTelemetry spans); with no sink nothing is built, and this module
imports no tracing library. Records are emitted where the work happened, inside its
step (an LLM call, a tool call) or when the run's end is committed (the run, with the
times it waited), so each is emitted again only if its step runs again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from helix_dbos.orchestration.types import LLMRequest, LLMUsage, StepResult, ToolCall


@dataclass(frozen=True)
class ChatRecord:
    """One model call (an attempt of a `helix.llm` step)."""

    session_id: str
    run_id: str
    agent_name: str
    step: int
    attempt: int
    provider: str
    request: LLMRequest
    start_ns: int
    end_ns: int
    result: StepResult | None = None
    error: str | None = None


@dataclass(frozen=True)
class ToolRecord:
    """One tool call: run in its step, or answered from outside (a client, a human)."""

    session_id: str
    run_id: str
    agent_name: str
    step: int
    call: ToolCall
    start_ns: int
    end_ns: int
    result: Any = None
    error: str | None = None


@dataclass(frozen=True)
class WaitRecord:
    """A wait for a human or a client: suspended at `suspended_at`, resumed at `resumed_at`."""

    tool_call_id: str
    tool_name: str
    kind: str
    status: str
    suspended_at: datetime
    resumed_at: datetime | None


@dataclass(frozen=True)
class RunRecord:
    """One run, from its start to its committed end, with its waits and tokens."""

    session_id: str
    run_id: str
    agent_name: str
    status: str
    step_count: int
    started_at: datetime
    finished_at: datetime
    error: str | None
    usage: LLMUsage
    waits: list[WaitRecord] = field(default_factory=list)


SpanRecord = ChatRecord | ToolRecord | RunRecord
Sink = Callable[[SpanRecord], None]

_sink: Sink | None = None


def set_sink(sink: Sink | None) -> None:
    global _sink
    _sink = sink


def tracing() -> bool:
    return _sink is not None


def emit(record: SpanRecord) -> None:
    """Hand a record to the sink; a failing sink never fails the run."""
    if _sink is None:
        return
    try:
        _sink(record)
    except Exception as exc:  # tracing is best effort
        logging.getLogger("helix_dbos").warning("helix tracing failed: %s", exc, exc_info=True)


def now_ns() -> int:
    return time.time_ns()
