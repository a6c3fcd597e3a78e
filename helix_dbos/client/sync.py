# Generated from aio.py by scripts/unasync.py; do not edit.
"""`HelixClient`: the helix HTTP API from sync code (httpx)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Any, TypeVar

import httpx

from helix_dbos.api.checkpoints import Checkpoint, CheckpointView
from helix_dbos.api.models import (
    AnsweredCall,
    ChatResponse,
    ControlResponse,
    Forked,
    QueuedMessage,
    RunStarted,
    RunSummary,
    StatusResponse,
    SubmitToolResultResponse,
    TerminatingConfigModel,
    TranscriptMessage,
    UsageResponse,
    Workspace,
)
from helix_dbos.api.runs import RunInfo
from helix_dbos.client import calls
from helix_dbos.client.base import (
    RETRY_STATUSES,
    ClientOptions,
    Reconnect,
    event_chunk,
    json_body,
    parse,
    retryable,
    stream_headers,
)
from helix_dbos.client.errors import APIConnectionError, InternalServerError, status_error
from helix_dbos.client.sse import SSEDecoder
from helix_dbos.client.sync_schedules import ScheduleCalls
from helix_dbos.client.tls import shared_ssl_context
from helix_dbos.orchestration.double_texting import MultitaskStrategy
from helix_dbos.orchestration.parts import UserPart
from helix_dbos.orchestration.usage_limits import UsageLimits
from helix_dbos.streaming.chunks import StreamChunk

T = TypeVar("T")


class HelixClient(ScheduleCalls):
    """A helix server's HTTP API, typed with the server's own models.

    ```python
    with HelixClient("http://127.0.0.1:8000", token="...") as helix:
        run = helix.start("assistant", "Hello")
        for chunk in helix.stream(run.session_id, run_id=run.run_id):
            print(chunk.type, chunk.payload)
    ```

    Errors are exceptions (`NotFoundError` for a 404, `ConflictError` for a 409, ...,
    `APIConnectionError` when no answer came). Reads, and starts with an
    `idempotency_key`, are sent again (`max_retries`) when the server did not answer or
    answered 502-504. `stream()` resumes after a dropped connection from the last event
    it delivered, so no chunk is lost or repeated.
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 2,
        retry_delay: float = 0.5,
        stream_read_timeout: float = 60.0,
        max_reconnects: int = 10,
        turn_timeout: float = 600.0,
        http_client: httpx.Client | None = None,
    ) -> None:
        self.options = ClientOptions(
            base_url.rstrip("/"),
            token,
            timeout,
            max_retries,
            retry_delay,
            stream_read_timeout,
            max_reconnects,
            turn_timeout,
        )
        self._own_http = http_client is None
        self._http = http_client or httpx.Client(
            base_url=self.options.base_url,
            timeout=timeout,
            headers=self.options.headers(),
            verify=shared_ssl_context(),
        )
        if http_client is not None:
            self._http.headers.update(self.options.headers())

    def __enter__(self) -> HelixClient:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._own_http:
            self._http.close()

    def _send(self, call: calls.Call[T]) -> T:
        attempts = 1 + (self.options.max_retries if retryable(call) else 0)
        for attempt in range(attempts):
            try:
                response = self._http.request(
                    call.method,
                    call.path,
                    params=call.params or None,
                    json=call.json(),
                    timeout=self.options.timeout_of(call),
                )
            except httpx.TransportError as exc:
                if attempt + 1 >= attempts:
                    raise APIConnectionError(f"{call.method} {call.path}: {exc!r}") from exc
            else:
                if response.status_code not in RETRY_STATUSES or attempt + 1 >= attempts:
                    result: T = parse(call, response)
                    return result
            time.sleep(self.options.backoff(attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    # --- runs -------------------------------------------------------------------

    def start(
        self,
        agent: str,
        input: str | None = None,
        *,
        session_id: str | None = None,
        state: dict[str, Any] | None = None,
        priority: int | None = None,
        idempotency_key: str | None = None,
        multitask_strategy: MultitaskStrategy | None = None,
        tenant: str | None = None,
        parts: Sequence[UserPart] = (),
        usage_limits: UsageLimits | None = None,
    ) -> RunStarted:
        """Start a run (`POST /start`); with `idempotency_key`, at most once per key.
        `parts`: images and documents sent with `input` (docs/content-parts.md);
        `usage_limits`: caps over the run and its descendants (docs/agent-controls.md)."""
        return self._send(
            calls.start(
                agent=agent,
                input=input,
                parts=[p.model_dump(mode="json") for p in parts] or None,
                usage_limits=usage_limits.to_json() if usage_limits is not None else None,
                session_id=session_id,
                state=state,
                priority=priority,
                idempotency_key=idempotency_key,
                multitask_strategy=multitask_strategy,
                tenant=tenant,
            )
        )

    def resume(self, session_id: str, message: str | None = None) -> RunStarted:
        return self._send(calls.resume(session_id, message))

    def status(self, session_id: str) -> StatusResponse:
        return self._send(calls.status(session_id))

    def stream(
        self, session_id: str, *, run_id: str | None = None, after_seq: int = 0
    ) -> Iterator[StreamChunk]:
        """The session's (or run's) chunks after `after_seq`, live, until the stream's end.

        A dropped connection, a stream closed before its end, or a 502-504 is resumed
        from the last chunk delivered (`Last-Event-ID`), with backoff, up to
        `max_reconnects` times in a row without progress."""
        last, failures = after_seq, 0
        params = calls.stream_params(session_id, run_id, 0)
        while True:
            try:
                with self._http.stream(
                    "GET",
                    "/sse",
                    params=params,
                    headers=stream_headers(last),
                    timeout=self.options.stream_timeout(),
                ) as response:
                    if response.status_code >= 400:
                        response.read()
                        error = status_error(
                            response.status_code, json_body(response), response.text
                        )
                        if response.status_code not in RETRY_STATUSES:
                            raise error
                        raise Reconnect(error)
                    decoder = SSEDecoder()
                    for line in response.iter_lines():
                        event = decoder.feed(line)
                        if event is None:
                            continue
                        chunk = event_chunk(event)
                        if chunk is None:
                            return
                        failures = 0
                        if chunk.seq > last:
                            last = chunk.seq
                            yield chunk
                cause: Exception = APIConnectionError("the stream closed before its end")
            except (httpx.TransportError, Reconnect) as exc:
                cause = exc.error if isinstance(exc, Reconnect) else exc
            failures += 1
            if failures > self.options.max_reconnects:
                if isinstance(cause, InternalServerError):
                    raise cause
                raise APIConnectionError(f"stream of {session_id}: {cause!r}") from cause
            time.sleep(self.options.backoff(min(failures - 1, 4)))

    def wait(self, session_id: str, run_id: str | None = None) -> RunInfo:
        """Follow the session (or run) to the end of its stream; its last run then."""
        for _ in self.stream(session_id, run_id=run_id):
            pass
        session = self.status(session_id)
        last = session.last_run
        assert last is not None
        return last

    # --- control and answers ----------------------------------------------------

    def interrupt(self, session_id: str, reason: str | None = None) -> ControlResponse:
        return self._send(calls.control("interrupt", session_id, reason))

    def abort(self, session_id: str, reason: str | None = None) -> ControlResponse:
        return self._send(calls.control("abort", session_id, reason))

    def submit_tool_result(
        self,
        session_id: str,
        tool_call_id: str,
        result: Any = None,
        *,
        error: str | None = None,
        answered_by: str | None = None,
    ) -> SubmitToolResultResponse:
        """Hand in a client tool's result (or its `error`)."""
        fields = calls.answer_fields("client-tool-result", result=result, error=error)
        return self._answer(session_id, tool_call_id, "client-tool-result", fields, answered_by)

    def approve(
        self,
        session_id: str,
        tool_call_id: str,
        approved: bool = True,
        *,
        reason: str | None = None,
        answered_by: str | None = None,
    ) -> SubmitToolResultResponse:
        fields = calls.answer_fields("approval-response", approved=approved, reason=reason)
        return self._answer(session_id, tool_call_id, "approval-response", fields, answered_by)

    def deny(
        self,
        session_id: str,
        tool_call_id: str,
        *,
        reason: str | None = None,
        answered_by: str | None = None,
    ) -> SubmitToolResultResponse:
        return self.approve(session_id, tool_call_id, False, reason=reason, answered_by=answered_by)

    def submit_human_input(
        self,
        session_id: str,
        tool_call_id: str,
        human_input: str | None = None,
        *,
        approved: bool | None = None,
        answered_by: str | None = None,
    ) -> SubmitToolResultResponse:
        fields = calls.answer_fields("human-input", human_input=human_input, approved=approved)
        return self._answer(session_id, tool_call_id, "human-input", fields, answered_by)

    def _answer(
        self,
        session_id: str,
        tool_call_id: str,
        kind: str,
        fields: dict[str, Any],
        answered_by: str | None,
    ) -> SubmitToolResultResponse:
        extra = {"answered_by": answered_by} if answered_by is not None else {}
        return self._send(
            calls.submit_tool_result(
                session_id=session_id, tool_call_id=tool_call_id, kind=kind, **fields, **extra
            )
        )

    # --- reads --------------------------------------------------------------------

    def list_runs(
        self, *, status: str | None = None, session_id: str | None = None, limit: int = 100
    ) -> list[RunSummary]:
        return self._send(calls.list_runs(status, session_id, limit))

    def get_messages(self, session_id: str) -> list[TranscriptMessage]:
        return self._send(calls.messages(session_id))

    def get_part(self, session_id: str, sha256: str) -> bytes:
        """The bytes of an image or document of the session's transcript (a message's
        `parts`), from `GET /sessions/{id}/parts/{sha256}`."""
        return self._send(calls.part(session_id, sha256))

    def get_usage(self, session_id: str, *, include_children: bool = False) -> UsageResponse:
        return self._send(calls.usage(session_id, include_children))

    # --- time travel (docs/time-travel.md) ---------------------------------------------

    def get_checkpoints(self, session_id: str) -> list[Checkpoint]:
        return self._send(calls.checkpoints(session_id))

    def get_checkpoint(self, session_id: str, checkpoint_id: str) -> CheckpointView:
        return self._send(calls.checkpoint(session_id, checkpoint_id))

    def fork(
        self,
        session_id: str,
        at: str,
        *,
        state: dict[str, Any] | None = None,
        new_session_id: str | None = None,
    ) -> Forked:
        """A new session from the checkpoint `at`; the answer names it."""
        return self._send(calls.fork(session_id, at=at, state=state, new_session_id=new_session_id))

    def answered(self, limit: int = 20) -> list[AnsweredCall]:
        return self._send(calls.answered(limit))

    # --- double texting (docs/double-texting.md) ----------------------------------

    def queued_messages(self, session_id: str) -> list[QueuedMessage]:
        """The session's stored messages, oldest first, waiting ones with their place."""
        return self._send(calls.queue(session_id))

    def cancel_queued(self, session_id: str, message_id: str) -> QueuedMessage:
        """Cancel a stored message before its run starts (409 once it was taken)."""
        return self._send(calls.cancel_queued(session_id, message_id))

    def workspaces(self) -> list[Workspace]:
        return self._send(calls.workspaces())

    # --- chat (seed 004) ------------------------------------------------------------

    def chat(
        self,
        context_id: str,
        message: str,
        *,
        agent: str | None = None,
        terminating_config: TerminatingConfigModel | None = None,
        multitask_strategy: MultitaskStrategy | None = None,
        tenant: str | None = None,
        parts: Sequence[UserPart] = (),
    ) -> ChatResponse:
        """One turn to its end (`status` "waiting" when a human must answer first);
        `parts`: images and documents sent with `message`."""
        return self._send(
            calls.chat(
                context_id=context_id,
                message=message,
                parts=[p.model_dump(mode="json") for p in parts] or None,
                agent=agent,
                terminating_config=terminating_config,
                multitask_strategy=multitask_strategy,
                tenant=tenant,
            )
        )

    def chat_invoke(
        self,
        context_id: str,
        *,
        agent: str | None = None,
        terminating_config: TerminatingConfigModel | None = None,
        multitask_strategy: MultitaskStrategy | None = None,
        tenant: str | None = None,
    ) -> ChatResponse:
        return self._send(
            calls.chat_invoke(
                context_id=context_id,
                agent=agent,
                terminating_config=terminating_config,
                multitask_strategy=multitask_strategy,
                tenant=tenant,
            )
        )

    def add_ai_message(
        self,
        context_id: str,
        prompt: str | None = None,
        *,
        agent: str | None = None,
        terminating_config: TerminatingConfigModel | None = None,
        multitask_strategy: MultitaskStrategy | None = None,
        tenant: str | None = None,
    ) -> ChatResponse:
        return self._send(
            calls.add_ai_message(
                context_id=context_id,
                prompt=prompt,
                agent=agent,
                terminating_config=terminating_config,
                multitask_strategy=multitask_strategy,
                tenant=tenant,
            )
        )
