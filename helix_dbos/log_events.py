"""Structured log events: a stable event name and its fields on the `helix_dbos` logger.

Every field is an attribute of the record (`extra=`), and so is the name (`event`), so
the standard library's JSON formatters (python-json-logger) and structlog's
`ProcessorFormatter` (with `ExtraAdder`, whose `event` key the record's attribute then
sets) emit them as keys. The message is for people: `"<event>: <text>"`.
`record.helix_fields` holds the fields as one dict, for handlers that want them together.

Events are logged where their effect happens (inside the step or transaction that
makes it), so a replay of workflow code does not log them again; the few logged from
workflow code are marked below.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("helix_dbos")

# Runs.
RUN_STARTED = "run.started"  # the first LLM step of a run began
RUN_COMPLETED = "run.completed"
RUN_FAILED = "run.failed"
RUN_INTERRUPTED = "run.interrupted"
RUN_ABORTED = "run.aborted"
RUN_ENDED = {
    "completed": RUN_COMPLETED,
    "failed": RUN_FAILED,
    "interrupted": RUN_INTERRUPTED,
    "aborted": RUN_ABORTED,
}
RUN_SUSPENDED = "run.suspended"  # waits for a human or a client
RUN_RESUMED = "run.resumed"
# A long wait for a human let go of its coroutine (`wait_parking.py`), and came back.
RUN_PARKED = "run.parked"
RUN_UNPARKED = "run.unparked"
# LLM calls.
LLM_RETRY = "llm.retry"  # a retryable provider error: DBOS retries the step
LLM_FAILED = "llm.failed"  # retries ran out, or the error was not retryable (workflow code)
# A run's tree reached one of its usage limits: the model is not asked (issue 50).
USAGE_LIMIT = "run.usage_limit"
# A tool call's id was replaced by a helix id (duplicate, reused, empty, too long).
TOOL_CALL_REKEYED = "tool_call.rekeyed"
# Output validation (workflow code).
OUTPUT_VALIDATION_FAILED = "output.validation_failed"
# Hooks.
HOOK_FAILED = "hook.failed"
# MCP: a server was down when its tools were listed; its stored list is used.
MCP_TOOLS_FROM_STORE = "mcp.tools_from_store"
# Sub-agents (seed 002): a child that could not be dispatched (workflow code).
SUBAGENT_DISPATCH_FAILED = "subagent.dispatch_failed"

# Gated calls, one family per kind of wait (seed 002's `client_tool.*`).
GATE_PREFIX = {"client": "client_tool", "approval": "approval", "human_input": "human_input"}
# suspended, submitted, timeout, aborted, validation_failed; approvals also approved/denied.
GATE_ACTIONS = ("suspended", "submitted", "approved", "denied", "timeout", "aborted")

# Names a LogRecord already uses: a field by that name is logged as `field_<name>`.
_RESERVED = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


def gate_event(kind: str, action: str) -> str:
    """`client_tool.timeout`, `approval.denied`, `human_input.submitted`, ..."""
    return f"{GATE_PREFIX.get(kind, kind)}.{action}"


def log_event(
    event: str,
    level: int = logging.INFO,
    text: str | None = None,
    *,
    exc_info: bool = False,
    **fields: Any,
) -> None:
    """Log `event` with `fields` as record attributes; `text` says it for people."""
    if not logger.isEnabledFor(level):
        return
    extra: dict[str, Any] = {(f"field_{k}" if k in _RESERVED else k): v for k, v in fields.items()}
    extra["event"] = event
    extra["helix_fields"] = dict(fields)
    message = f"{event}: {text}" if text else event
    logger.log(level, "%s", message, extra=extra, exc_info=exc_info, stacklevel=2)
