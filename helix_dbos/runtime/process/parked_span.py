"""A parked run's DBOS workflow span ends as parked, not as failed.

Parking a run cancels its workflow's task (`wait_parking.py`); DBOS then ends the
workflow's span (when DBOS tracing is on) with an ERROR status, as for any exception,
though nothing failed: the run waits, parked, and a later execution of the workflow
(its own span) takes it on. Just before that, in the workflow's task, the span gets a
`helix.run.parked` event, the attribute `helix.parked` and an OK status, which
OpenTelemetry keeps final, so the ERROR that follows is ignored. DBOS's span of the
`recv` itself ends (inside DBOS, before helix can mark it) with the cancellation's
message as its error's description: `PARKED_MESSAGE`, which says what happened.

OpenTelemetry is optional (DBOS's `otel` extra, helix's): without it there is no span.
"""

from __future__ import annotations

try:
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode

    TRACING = True
except ImportError:  # pragma: no cover - the extra is not installed: no spans at all
    TRACING = False

PARKED_EVENT = "helix.run.parked"
PARKED_MESSAGE = "helix: run parked while it waits (not a failure; its answer resumes it)"
PARKED_ATTRIBUTE = "helix.parked"


def mark_parked(workflow_id: str) -> None:
    """Mark the current span (the workflow's, at its `recv`) as parked."""
    if not TRACING:
        return
    span = trace.get_current_span()
    if not span.is_recording():
        return
    span.add_event(PARKED_EVENT, {"helix.workflow_id": workflow_id})
    span.set_attribute(PARKED_ATTRIBUTE, True)
    span.set_status(Status(StatusCode.OK))
