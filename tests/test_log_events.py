"""Structured log events (seed 002's `client_tool.*`, and runs, approvals, LLM retries):
stable names and fields on the `helix_dbos` logger, as record attributes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

import pytest
from dbos import DBOS
from helpers import calls

from helix_dbos import AgentHooks, ClientResult, tool
from helix_dbos.definitions.agent import LLMConfig
from helix_dbos.llm.base import LLMProviderError
from helix_dbos.log_events import log_event
from helix_dbos.runtime.process.event_loop import on_target_loop


def events(caplog: pytest.LogCaptureFixture, run_or_session: str) -> list[logging.LogRecord]:
    """The records of one run or session that carry an event name, in order."""
    return [
        r
        for r in caplog.records
        if getattr(r, "event", None)
        and run_or_session in (getattr(r, "run_id", None), getattr(r, "session_id", None))
    ]


def names(records: list[logging.LogRecord]) -> list[str]:
    return [r.event for r in records]  # type: ignore[attr-defined]


def one(records: list[logging.LogRecord], event: str) -> logging.LogRecord:
    found = [r for r in records if r.event == event]  # type: ignore[attr-defined]
    assert len(found) == 1, f"{event}: {names(records)}"
    return found[0]


async def wait_for_pending(helix, session_id: str) -> None:
    for _ in range(400):
        if [p for p in await helix.pending_tool_calls(session_id) if not p.answered]:
            run = await helix.get_current_run(session_id)
            if run is not None and run.status in ("waiting", "paused"):
                return
        await asyncio.sleep(0.05)
    raise AssertionError("the run never waited")


@tool(execute="client")
def locate() -> dict:
    """The client's location."""


async def test_a_client_tool_round_trip_logs_suspended_submitted_and_the_run(
    helix, make_agent, mock_llm, caplog
):
    agent = make_agent(tools=[locate])
    mock_llm.add_responses(
        calls(("loc", "locate", {})), {"type": "text", "content": "found"}, agent=agent.name
    )
    with caplog.at_level(logging.INFO, logger="helix_dbos"):
        handle = await helix.execute(agent, "where am I?")
        await wait_for_pending(helix, handle.session_id)

        async def malformed() -> None:  # straight through DBOS: the run ignores it
            await DBOS.send_async(handle.workflow_id, {"bogus": 1}, "helix.tool_result")

        await on_target_loop(malformed)
        await helix.submit_tool_result(handle.session_id, "loc", {"lat": 1})
        result = await handle.result()
    assert result.status == "completed"
    seen = events(caplog, handle.run_id)
    # The run reads the malformed message on its own time: anywhere while it waits.
    assert [n for n in names(seen) if n != "client_tool.validation_failed"] == [
        "run.started",
        "client_tool.suspended",
        "run.suspended",
        "client_tool.submitted",
        "run.resumed",
        "run.completed",
    ]
    suspended = one(seen, "client_tool.suspended")
    assert suspended.levelno == logging.INFO
    assert (suspended.tool_call_id, suspended.tool_name, suspended.session_id) == (  # type: ignore[attr-defined]
        "loc",
        "locate",
        handle.session_id,
    )
    assert suspended.agent_name == agent.name and suspended.timeout_seconds == 600  # type: ignore[attr-defined]
    assert suspended.helix_fields["tool_call_id"] == "loc"  # type: ignore[attr-defined]
    assert one(seen, "run.suspended").waiting_for == "client_tool"  # type: ignore[attr-defined]
    invalid = one(seen, "client_tool.validation_failed")
    assert invalid.levelno == logging.WARNING and "malformed" in invalid.error  # type: ignore[attr-defined]
    submitted = one(seen, "client_tool.submitted")
    assert (submitted.tool_call_id, submitted.error) == ("loc", None)  # type: ignore[attr-defined]
    assert one(seen, "run.resumed").tool_call_ids == ["loc"]  # type: ignore[attr-defined]
    completed = one(seen, "run.completed")
    assert (completed.status, completed.step) == ("completed", 2)  # type: ignore[attr-defined]
    assert completed.getMessage().startswith("run.completed")


async def test_a_malformed_submission_is_logged_before_it_is_refused(helix, caplog):
    with (
        caplog.at_level(logging.WARNING, logger="helix_dbos"),
        pytest.raises(Exception, match="Malformed answer"),
    ):
        await helix.answer("s-malformed", "c9", ClientResult(error=123))  # type: ignore[arg-type]
    record = one(events(caplog, "s-malformed"), "client_tool.validation_failed")
    assert record.tool_call_id == "c9" and "valid string" in record.error.lower()  # type: ignore[attr-defined]


async def test_a_client_tool_deadline_logs_a_timeout(helix, make_agent, mock_llm, caplog):
    @tool(execute="client", client_timeout_seconds=0.3)
    def scan() -> dict:
        """Scan on the client."""

    agent = make_agent(tools=[scan])
    mock_llm.add_responses(
        calls(("s1", "scan", {})), {"type": "text", "content": "gave up"}, agent=agent.name
    )
    with caplog.at_level(logging.INFO, logger="helix_dbos"):
        result = await (await helix.execute(agent, "scan")).result()
    seen = events(caplog, result.run_id)
    timeout = one(seen, "client_tool.timeout")
    assert timeout.levelno == logging.WARNING and timeout.tool_call_id == "s1"  # type: ignore[attr-defined]
    assert "client_tool.submitted" not in names(seen)


async def test_abort_while_waiting_logs_aborted_calls_and_run(helix, make_agent, mock_llm, caplog):
    agent = make_agent(tools=[locate])
    mock_llm.add_responses(calls(("l2", "locate", {})), agent=agent.name)
    with caplog.at_level(logging.INFO, logger="helix_dbos"):
        handle = await helix.execute(agent, "where?")
        await wait_for_pending(helix, handle.session_id)
        await helix.abort(handle.session_id, reason="user left")
        await handle.result()
    seen = events(caplog, handle.run_id)
    aborted = one(seen, "client_tool.aborted")
    assert (aborted.tool_call_id, aborted.reason, aborted.cause) == ("l2", "user left", "aborted")  # type: ignore[attr-defined]
    assert one(seen, "run.aborted").reason == "user left"  # type: ignore[attr-defined]


async def test_approvals_log_requested_and_denied(helix, make_agent, mock_llm, caplog):
    @tool(require_approval=True)
    def wipe(path: str) -> str:
        """Wipe a path."""
        return path

    agent = make_agent(tools=[wipe])
    mock_llm.add_responses(
        calls(("w", "wipe", {"path": "/"})), {"type": "text", "content": "ok"}, agent=agent.name
    )
    with caplog.at_level(logging.INFO, logger="helix_dbos"):
        handle = await helix.execute(agent, "wipe")
        await wait_for_pending(helix, handle.session_id)
        await helix.deny(handle.session_id, "w", reason="too much")
        await handle.result()
    seen = events(caplog, handle.run_id)
    assert one(seen, "approval.suspended").tool_name == "wipe"  # type: ignore[attr-defined]
    assert one(seen, "approval.denied").reason == "too much"  # type: ignore[attr-defined]
    assert "approval.approved" not in names(seen)


async def test_llm_retries_and_the_final_failure_are_logged(helix, make_agent, mock_llm, caplog):
    agent = make_agent(llm=LLMConfig(max_attempts=2, retry_interval_seconds=0.01))

    def rate_limited(request):
        raise LLMProviderError("429 Too Many Requests", retryable=True, status_code=429)

    mock_llm.set_responder(rate_limited)
    try:
        with caplog.at_level(logging.INFO, logger="helix_dbos"):
            result = await asyncio.wait_for((await helix.execute(agent, "hi")).result(), 30)
    finally:
        mock_llm.set_responder(None)
    seen = events(caplog, result.run_id)
    retries = [r for r in seen if r.event == "llm.retry"]  # type: ignore[attr-defined]
    assert [(r.attempt, r.max_attempts, r.status_code) for r in retries] == [  # type: ignore[attr-defined]
        (1, 2, 429),
        (2, 2, 429),
    ]
    assert one(seen, "llm.failed").levelno == logging.ERROR
    failed = one(seen, "run.failed")
    assert failed.levelno == logging.WARNING and "429" in failed.error  # type: ignore[attr-defined]


async def test_a_failing_hook_is_an_error_event_with_its_context(
    helix, make_agent, mock_llm, caplog
):
    def broken(event):
        raise RuntimeError("boom")

    agent = make_agent(hooks=AgentHooks(on_agent_complete=broken))
    mock_llm.add_response({"type": "text", "content": "hi"}, agent=agent.name)
    with caplog.at_level(logging.INFO, logger="helix_dbos"):
        result = await (await helix.execute(agent, "hi")).result()
    assert result.status == "completed"
    failed = one(events(caplog, result.run_id), "hook.failed")
    assert (failed.hook, failed.event_type, failed.step) == ("broken", "RunEvent", 1)  # type: ignore[attr-defined]
    assert failed.levelno == logging.ERROR and failed.exc_info is not None


def test_fields_are_record_attributes_a_json_formatter_emits():
    """What a stdlib JSON formatter (python-json-logger) or structlog's ExtraAdder sees:
    the non-standard attributes of the record; a field named like a LogRecord
    attribute is renamed, never dropped or clashing."""
    standard = set(vars(logging.makeLogRecord({}))) | {"message"}
    captured: list[logging.LogRecord] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            captured.append(record)

    handler = Capture()
    log = logging.getLogger("helix_dbos")
    log.addHandler(handler)
    old = log.level
    log.setLevel(logging.INFO)
    try:
        log_event("client_tool.timeout", logging.WARNING, "late", tool_call_id="c", name="n")
    finally:
        log.removeHandler(handler)
        log.setLevel(old)
    record = captured[0]
    extras = {k: v for k, v in vars(record).items() if k not in standard}
    assert json.loads(json.dumps(extras)) == {
        "event": "client_tool.timeout",
        "tool_call_id": "c",
        "field_name": "n",
        "helix_fields": {"tool_call_id": "c", "name": "n"},
    }
    assert record.getMessage() == "client_tool.timeout: late"


async def _replay(helix, run_id: str) -> None:
    """Run the run's workflow code again over all its checkpoints (a fork from past its
    last step: every step is replayed, none runs), as a recovery would."""
    run = await helix.get_run(run_id)
    # Under the version the run was recorded by, as a recovery runs it. A fork without one
    # is dequeued only by the newest version DBOS has seen: once another module's process
    # had started a newer one, this session's never ran it and each wait ran out its 30 s.
    version = (await DBOS.get_workflow_status_async(run.workflow_id)).app_version
    forked = await DBOS.fork_workflow_async(run.workflow_id, 10_000, application_version=version)
    # Its end was written by the run itself: only what it logs matters here.
    with contextlib.suppress(Exception):
        await asyncio.wait_for(forked.get_result(), 30)


async def test_workflow_code_events_are_not_logged_again_on_replay(
    helix, make_agent, mock_llm, caplog
):
    """`llm.failed` (after the LLM step's recorded error) and a client tool's timeout
    (from the wait's resume statement) are logged by the execution that ran them."""
    failing = make_agent(llm=LLMConfig(max_attempts=1, retry_interval_seconds=0.01))

    def rate_limited(request):
        raise LLMProviderError("429 Too Many Requests", retryable=True, status_code=429)

    @tool(execute="client", client_timeout_seconds=0.3)
    def scan() -> dict:
        """Scan on the client."""

    waiting = make_agent(tools=[scan])
    mock_llm.add_responses(
        calls(("s1", "scan", {})), {"type": "text", "content": "gave up"}, agent=waiting.name
    )
    with caplog.at_level(logging.INFO, logger="helix_dbos"):
        timed_out = await (await helix.execute(waiting, "scan")).result()
        mock_llm.set_responder(rate_limited)
        try:
            failed = await asyncio.wait_for((await helix.execute(failing, "hi")).result(), 30)
        finally:
            mock_llm.set_responder(None)
        assert failed.status == "failed" and timed_out.status == "completed"
        await _replay(helix, failed.run_id)
        await _replay(helix, timed_out.run_id)
    one(events(caplog, failed.run_id), "llm.failed")
    one(events(caplog, timed_out.run_id), "client_tool.timeout")
    one(events(caplog, timed_out.run_id), "run.resumed")
