"""OpenTelemetry spans for helix runs, following the GenAI semantic conventions.

`instrument()` (extra `otel`) turns the runtime's trace records into spans:
`invoke_agent <agent>` per run, `chat <model>` per LLM call and `execute_tool <tool>`
per tool call. A session is one trace: its id is derived from the session id, and a
run's span id from the run id, so the spans of a session that ran in several
processes, across crashes and waits for humans, meet in one trace. A run's span is
made when its end is committed, from the database's times, with an event where it
suspended for a human and where it resumed. Message content stays out of spans
unless `capture_content=True`.

The spans carry their own explicit context and never change the current one, so
DBOS's own workflow and step spans (when DBOS tracing is on) are left as they are;
a helix span made inside a DBOS step links to that step's span.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
    TracerProvider,
)

from helix_dbos.orchestration.messages import to_json_text
from helix_dbos.orchestration.types import ErrorStepResult, ToolCallsStepResult
from helix_dbos.runtime.steps import spans
from helix_dbos.runtime.steps.spans import ChatRecord, RunRecord, SpanRecord, ToolRecord

SCOPE = "helix_dbos"
_planned: ContextVar[tuple[int, int] | None] = ContextVar("helix_planned_ids", default=None)


def session_trace_id(session_id: str) -> int:
    """The trace of a session: 128 bits of a hash of its id (never zero)."""
    return _bits(f"trace:{session_id}", 16)


def run_span_id(run_id: str) -> int:
    """The `invoke_agent` span of a run: 64 bits of a hash of its id."""
    return _bits(f"run:{run_id}", 8)


def _bits(text: str, size: int) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:size], "big") or 1


class _PlannedIds:
    """An SDK id generator that hands out the ids helix planned for the span being
    started (its deterministic run span), and the usual random ones otherwise."""

    def __init__(self, fallback: Any) -> None:
        self.fallback = fallback

    def generate_trace_id(self) -> int:
        planned = _planned.get()
        return planned[0] if planned else int(self.fallback.generate_trace_id())

    def generate_span_id(self) -> int:
        planned = _planned.get()
        return planned[1] if planned else int(self.fallback.generate_span_id())

    def is_trace_id_random(self) -> bool:
        """A planned trace id is a hash, not random (W3C's random flag stays off)."""
        if _planned.get() is not None:
            return False
        check = getattr(self.fallback, "is_trace_id_random", None)
        return bool(check()) if check is not None else False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fallback, name)


class HelixSpans:
    """Makes the spans of one tracer from the runtime's records."""

    def __init__(self, tracer: Tracer, *, capture_content: bool) -> None:
        self.tracer = tracer
        self.capture_content = capture_content
        ids = getattr(tracer, "id_generator", None)  # the SDK's Tracer; a no-op has none
        if ids is not None and not isinstance(ids, _PlannedIds):
            tracer.id_generator = _PlannedIds(ids)  # type: ignore[attr-defined]

    def __call__(self, record: SpanRecord) -> None:
        if isinstance(record, ChatRecord):
            self.chat(record)
        elif isinstance(record, ToolRecord):
            self.tool(record)
        else:
            self.run(record)

    def chat(self, r: ChatRecord) -> None:
        model = r.request.model.split(":", 1)[-1]
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": r.provider,
            "gen_ai.request.model": model,
            "gen_ai.agent.name": r.agent_name,
            "gen_ai.conversation.id": r.session_id,
            "helix.run_id": r.run_id,
            "helix.step": r.step,
            "helix.attempt": r.attempt,
        }
        if r.request.max_tokens is not None:
            attributes["gen_ai.request.max_tokens"] = r.request.max_tokens
        if r.request.temperature is not None:
            attributes["gen_ai.request.temperature"] = r.request.temperature
        result, error = r.result, r.error
        if isinstance(result, ErrorStepResult):
            error = result.error
        if result is not None and not isinstance(result, ErrorStepResult):
            attributes["gen_ai.response.finish_reasons"] = [str(result.stop_reason or "")]
        usage = result.usage if result is not None else None
        if usage is not None:
            if usage.model:
                attributes["gen_ai.response.model"] = usage.model
            attributes["gen_ai.usage.input_tokens"] = usage.input_tokens
            attributes["gen_ai.usage.output_tokens"] = usage.output_tokens
            attributes["gen_ai.usage.cache_read.input_tokens"] = usage.cache_read_tokens
            attributes["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_write_tokens
            attributes["gen_ai.usage.reasoning.output_tokens"] = usage.reasoning_tokens
        if self.capture_content:
            attributes["gen_ai.input.messages"] = _json(
                [m.model_dump() for m in r.request.messages]
            )
            if result is not None:
                attributes["gen_ai.output.messages"] = _json(_output(result))
        self._child(
            f"chat {model}", r.session_id, r.run_id, r.start_ns, r.end_ns, attributes, error
        )

    def tool(self, r: ToolRecord) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": r.call.name,
            "gen_ai.tool.call.id": r.call.id,
            "gen_ai.tool.type": "function",
            "gen_ai.agent.name": r.agent_name,
            "gen_ai.conversation.id": r.session_id,
            "helix.run_id": r.run_id,
            "helix.step": r.step,
        }
        if self.capture_content:
            attributes["gen_ai.tool.call.arguments"] = _json(r.call.arguments)
            if r.error is None:
                attributes["gen_ai.tool.call.result"] = to_json_text(r.result)
        self._child(
            f"execute_tool {r.call.name}",
            r.session_id,
            r.run_id,
            r.start_ns,
            r.end_ns,
            attributes,
            r.error,
        )

    def run(self, r: RunRecord) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": r.agent_name,
            "gen_ai.conversation.id": r.session_id,
            "gen_ai.usage.input_tokens": r.usage.input_tokens,
            "gen_ai.usage.output_tokens": r.usage.output_tokens,
            "helix.run_id": r.run_id,
            "helix.status": r.status,
            "helix.step_count": r.step_count,
        }
        ids = (session_trace_id(r.session_id), run_span_id(r.run_id))
        with _planning(ids):
            span = self.tracer.start_span(
                f"invoke_agent {r.agent_name}",
                context=Context(),  # a root: the session's trace, not the caller's
                kind=SpanKind.INTERNAL,
                attributes=attributes,
                start_time=_ns(r.started_at),
                links=_dbos_link(),
            )
        for wait in r.waits:
            what = {"tool_call_id": wait.tool_call_id, "tool_name": wait.tool_name}
            what["helix.waiting_for"] = wait.kind
            span.add_event("helix.run.suspended", what, timestamp=_ns(wait.suspended_at))
            if wait.resumed_at is not None:
                resumed = {**what, "helix.resolution": wait.status}
                span.add_event("helix.run.resumed", resumed, timestamp=_ns(wait.resumed_at))
        if r.status != "completed":
            span.set_attribute("error.type", r.status)
            span.set_status(Status(StatusCode.ERROR, r.error or r.status))
        span.end(end_time=_ns(r.finished_at))

    def _child(
        self,
        name: str,
        session_id: str,
        run_id: str,
        start_ns: int,
        end_ns: int,
        attributes: dict[str, Any],
        error: str | None,
    ) -> None:
        """A span under its run's `invoke_agent` span (made, with that very id, later)."""
        parent = SpanContext(
            session_trace_id(session_id),
            run_span_id(run_id),
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
        context = trace.set_span_in_context(NonRecordingSpan(parent), Context())
        kind = (
            SpanKind.CLIENT if attributes["gen_ai.operation.name"] == "chat" else SpanKind.INTERNAL
        )
        span = self.tracer.start_span(
            name,
            context=context,
            kind=kind,
            attributes=attributes,
            start_time=start_ns,
            links=_dbos_link(),
        )
        if error is not None:
            span.set_attribute("error.type", "tool_error" if "tool" in name else "llm_error")
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=end_ns)


def instrument(
    tracer_provider: TracerProvider | None = None, *, capture_content: bool = False
) -> HelixSpans:
    """Emit helix's spans through `tracer_provider` (the global one by default: set
    yours up first). `capture_content=True` puts messages, tool arguments and results
    into the spans; off by default, as they may hold personal data."""
    provider = tracer_provider or trace.get_tracer_provider()
    sink = HelixSpans(provider.get_tracer(SCOPE), capture_content=capture_content)
    spans.set_sink(sink)
    return sink


def uninstrument() -> None:
    spans.set_sink(None)


@contextmanager
def _planning(ids: tuple[int, int]) -> Iterator[None]:
    token = _planned.set(ids)
    try:
        yield
    finally:
        _planned.reset(token)


def _dbos_link() -> list[Link]:
    """A link to the span current where the record was made (DBOS's step span, when
    DBOS traces), so both views connect without either changing the other."""
    current = trace.get_current_span().get_span_context()
    return [Link(current)] if current.is_valid else []


def _ns(moment: Any) -> int:
    return int(moment.timestamp() * 1_000_000_000)


def _json(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


def _output(result: Any) -> list[dict[str, Any]]:
    if isinstance(result, ErrorStepResult):
        return []
    message: dict[str, Any] = {"role": "assistant", "content": getattr(result, "content", None)}
    if isinstance(result, ToolCallsStepResult):
        message["tool_calls"] = [c.model_dump() for c in result.tool_calls]
    return [message]
