"""The A2A request handler of one helix agent: every A2A method as `HelixDBOS` calls.

Nothing lives in memory: a task is the helix run (task id = run id, context id = session
id), its events are read from the run's stream, so a client that reconnects, or asks a
relaunched server, gets the same task. `message/send` with a new `message_id` starts a
run under the idempotency key `a2a:<agent>:<message_id>` (a retried send gets the run
the first one started); a message naming a task that waits for a human answers it.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from a2a.helpers import get_data_parts, get_text_parts
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import (
    A2AError,
    ExtendedAgentCardNotConfiguredError,
    InvalidParamsError,
    InvalidRequestError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from fastapi import HTTPException

from helix_dbos.a2a_wire import mapping
from helix_dbos.api import answers as helix_answers
from helix_dbos.api.models import RunStarted, StartRequest
from helix_dbos.api.runs import PendingToolCall, RunInfo
from helix_dbos.errors import HelixError
from helix_dbos.runtime.steps.results import TERMINAL_STATUSES
from helix_dbos.server.endpoints.run_routes import record_answerer
from helix_dbos.server.http.auth import Principal
from helix_dbos.server.http.error_responses import status_for
from helix_dbos.server.http.keyed_start import start_once
from helix_dbos.server.http.route_context import ServerContext
from helix_dbos.server.http.visibility import require_own_new_session, require_visible
from helix_dbos.server.protocols.a2a.answers import Answer, parse_answers

PRINCIPAL = "helix_principal"
CANCEL_WAIT_SECONDS = 30.0
T = TypeVar("T")
P = ParamSpec("P")


def a2a_error(exc: Exception) -> A2AError:
    """A helix or HTTP error as the A2A error a client can act on (never an internal one)."""
    if isinstance(exc, HTTPException):
        status, detail = exc.status_code, str(exc.detail)
    else:
        status, detail = status_for(exc), str(exc)
    if status == 404:
        return TaskNotFoundError(message=detail)
    if status == 409:
        return UnsupportedOperationError(message=detail)
    if status == 503:  # the stream caps: the client may try again later
        return InvalidRequestError(message=detail)
    return InvalidParamsError(message=detail)


def translated(
    method: Callable[P, Coroutine[Any, Any, T]],
) -> Callable[P, Coroutine[Any, Any, T]]:
    """Helix's errors out of a handler method as A2A errors."""

    @functools.wraps(method)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await method(*args, **kwargs)
        except (HelixError, HTTPException) as exc:
            raise a2a_error(exc) from exc

    return wrapper


async def translated_stream(events: AsyncIterator[Event]) -> AsyncGenerator[Event]:
    try:
        async for event in events:
            yield event
    except (HelixError, HTTPException) as exc:
        raise a2a_error(exc) from exc


def message_input(message: Message) -> str:
    """A new task's input: its text parts, or its data parts as JSON text."""
    texts = get_text_parts(message.parts)
    if texts:
        return "\n".join(texts)
    data = get_data_parts(message.parts)
    if data:
        return json.dumps(data[0] if len(data) == 1 else data)
    raise InvalidParamsError(message="The message has no text or data part to start a task with")


class HelixRequestHandler(RequestHandler):
    """A2A for the agent `agent_name` of the server `ctx`."""

    def __init__(self, ctx: ServerContext, agent_name: str) -> None:
        self.ctx, self.helix, self.agent_name = ctx, ctx.helix, agent_name

    # --- reading -----------------------------------------------------------------

    def _principal(self, context: ServerCallContext) -> Principal:
        principal = context.state.get(PRINCIPAL)
        if not isinstance(principal, Principal):  # the edge guard sets it: fail closed
            raise InvalidParamsError(message="Not authenticated")
        return principal

    async def _run(self, task_id: str, context: ServerCallContext) -> RunInfo:
        if not task_id:
            raise InvalidParamsError(message="A task id is required")
        self.ctx.check_ids(task_id=task_id)
        try:
            run = await self.helix.get_run(task_id)
        except HelixError as exc:
            raise TaskNotFoundError(message=f"Task '{task_id}' not found") from exc
        if run.agent_name != self.agent_name:
            raise TaskNotFoundError(message=f"Task '{task_id}' not found")
        await require_visible(self.ctx, self._principal(context), run.session_id)
        return run

    async def _waiting(self, run: RunInfo) -> list[PendingToolCall]:
        """The unanswered calls the run waits for (its own and its sub-agents')."""
        pending = await self.helix.pending_tool_calls(run.session_id)
        return [p for p in pending if not p.answered and (p.run_id == run.run_id or p.depth > 0)]

    async def _task(self, run_id: str, history_length: int | None = None) -> Task:
        run = await self.helix.get_run(run_id)
        messages = await self.helix.get_run_messages(run_id)
        task = mapping.build_task(run, await self._waiting(run), messages)
        if history_length is not None and len(task.history) > history_length:
            kept = list(task.history)[len(task.history) - history_length :]
            del task.history[:]
            task.history.extend(kept)
        return task

    @translated
    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        run = await self._run(params.id, context)
        length = params.history_length if params.HasField("history_length") else None
        return await self._task(run.run_id, length)

    @translated
    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        if not params.context_id:
            raise UnsupportedOperationError(message="List the tasks of one context: context_id")
        self.ctx.check_ids(context_id=params.context_id)
        await require_visible(self.ctx, self._principal(context), params.context_id)
        runs = [r for r in await self.helix.list_runs(params.context_id)]
        tasks = [await self._task(r.run_id, 0) for r in runs if r.agent_name == self.agent_name]
        return ListTasksResponse(tasks=tasks, page_size=len(tasks), total_size=len(tasks))

    # --- sending -----------------------------------------------------------------

    async def _open(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> tuple[RunInfo, int]:
        """The run the message is for, and the stream position its events start after."""
        message = params.message
        if not message.message_id:
            raise InvalidParamsError(message="message.message_id is required")
        self.ctx.check_ids(message_id=message.message_id, context_id=message.context_id or None)
        if message.task_id:
            return await self._answer(message, context)
        principal = self._principal(context)
        session_id = message.context_id or None
        require_own_new_session(principal, session_id)
        if session_id is not None and await self._exists(session_id):
            await require_visible(self.ctx, principal, session_id)
        text = message_input(message)
        self.ctx.check_result_size("message", text)
        body = StartRequest(
            agent=self.agent_name,
            input=text,
            session_id=session_id,
            idempotency_key=f"a2a:{self.agent_name}:{message.message_id}",
        )
        started = await start_once(self.helix, body, self._start)
        return await self.helix.get_run(started.run_id), 0

    async def _exists(self, session_id: str) -> bool:
        try:
            await self.helix.get_session(session_id)
        except HelixError:
            return False
        return True

    async def _start(self, body: StartRequest) -> RunStarted:
        handle = await self.helix.execute(body.agent, body.input, session_id=body.session_id)
        return RunStarted(
            session_id=handle.session_id, run_id=handle.run_id, workflow_id=handle.workflow_id
        )

    async def _answer(self, message: Message, context: ServerCallContext) -> tuple[RunInfo, int]:
        run = await self._run(message.task_id, context)
        if message.context_id and message.context_id != run.session_id:
            raise InvalidParamsError(
                message=f"Task '{run.run_id}' is in context '{run.session_id}', "
                f"not '{message.context_id}'"
            )
        if run.status in TERMINAL_STATUSES:
            raise UnsupportedOperationError(
                message=f"Task '{run.run_id}' is {run.status}: send a new message in its "
                f"context '{run.session_id}' to go on"
            )
        pending = await self._waiting(run)
        if not pending:
            raise UnsupportedOperationError(
                message=f"Task '{run.run_id}' is working and waits for no input"
            )
        answers = parse_answers(message, pending)
        for answer in answers:
            self._check_size(answer)
        after = await self._last_seq(run.session_id)
        who = self._principal(context).name or "A2A"
        for answer in answers:
            await self._apply(answer)
            sid = answer.call.session_id or run.session_id
            await record_answerer(self.helix, sid, answer.call.tool_call_id, who)
        return await self.helix.get_run(run.run_id), after

    def _check_size(self, answer: Answer) -> None:
        for name, value in (
            ("human_input", answer.human_input),
            ("result", answer.result),
            ("reason", answer.reason),
        ):
            self.ctx.check_result_size(name, value)

    async def _apply(self, answer: Answer) -> None:
        call = answer.call
        sid = call.session_id
        assert sid is not None
        typed: helix_answers.Answer
        if call.kind == "approval":
            typed = helix_answers.verdict(bool(answer.approved), answer.reason)
        elif call.kind == "human_input":
            typed = helix_answers.HumanInput(answer.human_input, answer.approved)
        else:
            typed = helix_answers.ClientResult(answer.result, answer.error)
        await self.helix.answer(sid, call.tool_call_id, typed)

    async def _last_seq(self, session_id: str) -> int:
        rows = await self.helix.sql(
            "SELECT COALESCE(MAX(seq), 0) FROM helix.stream_chunks WHERE session_id = :s",
            {"s": session_id},
        )
        return int(rows[0][0])

    @translated
    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Task | Message:
        run, after = await self._open(params, context)
        if not params.configuration.return_immediately:
            async for _ in self._follow(run, after):
                pass
        return await self._task(run.run_id)

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        async def events() -> AsyncIterator[Event]:
            run, after = await self._open(params, context)
            release = self.ctx.streams.acquire(run.session_id)  # the caps of /sse
            try:
                yield await self._task(run.run_id)
                async for event in self._follow(run, after):
                    yield event
            finally:
                release()

        async for event in translated_stream(events()):
            yield event

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        async def events() -> AsyncIterator[Event]:
            run = await self._run(params.id, context)
            release = self.ctx.streams.acquire(run.session_id)
            try:
                async for event in self._subscribed(run):
                    yield event
            finally:
                release()

        async for event in translated_stream(events()):
            yield event

    async def _subscribed(self, run: RunInfo) -> AsyncIterator[Event]:
        """The task as it is now (the text streamed so far included), then what follows."""
        said = mapping.ChunkEvents(run.run_id, run.session_id)
        last = 0
        async for chunk in self.helix.stream(run.session_id, run_id=run.run_id, follow=False):
            last = chunk.seq
            said.of(chunk)
        messages = await self.helix.get_run_messages(run.run_id)
        snapshot = mapping.build_task(run, await self._waiting(run), messages, said.text)
        yield snapshot
        if snapshot.status.state in mapping.STOP_STATES:
            return
        async for event in self._follow(run, last, said):
            yield event

    async def _follow(
        self, run: RunInfo, after_seq: int, said: mapping.ChunkEvents | None = None
    ) -> AsyncIterator[Event]:
        """The run's events after `after_seq`, until it ends or waits for a human."""
        said = said or mapping.ChunkEvents(run.run_id, run.session_id)
        waiting = await self._waiting(run)
        if waiting:  # answered one call of several: the others still wait
            yield said.status(
                TaskState.TASK_STATE_INPUT_REQUIRED,
                mapping.status_message(run, TaskState.TASK_STATE_INPUT_REQUIRED, waiting),
            )
            return
        async for chunk in self.helix.stream(
            run.session_id, run_id=run.run_id, after_seq=after_seq
        ):
            if chunk.type in mapping.HUMAN_REQUESTS:
                current = await self.helix.get_run(run.run_id)
                waiting = await self._waiting(current)
                if waiting:
                    state = TaskState.TASK_STATE_INPUT_REQUIRED
                    yield said.status(state, mapping.status_message(current, state, waiting))
                    return
                continue
            for event in said.of(chunk):
                yield event
                if (
                    isinstance(event, TaskStatusUpdateEvent)
                    and event.status.state in mapping.FINAL_STATES
                ):
                    return
        # The stream ended without a terminal chunk (the run ended as it was read).
        ended = await self._task(run.run_id)
        yield said.status(
            ended.status.state, ended.status.message if ended.status.HasField("message") else None
        )

    # --- control -----------------------------------------------------------------

    @translated
    async def on_cancel_task(
        self, params: CancelTaskRequest, context: ServerCallContext
    ) -> Task | None:
        run = await self._run(params.id, context)
        if run.status in TERMINAL_STATUSES:
            raise TaskNotCancelableError(message=f"Task '{run.run_id}' is already {run.status}")
        await self.helix.abort(run.session_id, reason="canceled over A2A")
        await asyncio.wait_for(
            self.helix.wait_for_run_end(run.session_id, run.run_id), CANCEL_WAIT_SECONDS
        )
        return await self._task(run.run_id)

    # --- what helix does not offer over A2A ------------------------------------------

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        raise PushNotificationNotSupportedError

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        raise PushNotificationNotSupportedError

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        raise ExtendedAgentCardNotConfiguredError
