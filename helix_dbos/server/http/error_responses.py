"""Helix errors as HTTP statuses: unknown ids 404, conflicts 409, bad answers 422, a
process shutting down 503 (a load balancer retries elsewhere)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from helix_dbos.errors import (
    AgentAlreadyRunningError,
    AgentDefinitionError,
    AgentNotRegisteredError,
    AmbiguousToolCallError,
    CheckpointNotFoundError,
    ContentTooLargeError,
    HelixError,
    HelixShutDownError,
    InvalidAnswerError,
    InvalidInputError,
    QueuedMessageNotFoundError,
    QueuedMessageTakenError,
    RunNotActiveError,
    RunNotFoundError,
    RunOnOtherVersionError,
    ScheduleNotFoundError,
    SessionAgentMismatchError,
    SessionNotFoundError,
    StateUpdateError,
    ToolCallAlreadyAnsweredError,
    ToolCallNotFoundError,
)

STATUS_BY_ERROR: tuple[tuple[type[Exception], int], ...] = (
    (SessionNotFoundError, 404),
    (RunNotFoundError, 404),
    (AgentNotRegisteredError, 404),
    (ToolCallNotFoundError, 404),
    (CheckpointNotFoundError, 404),
    (QueuedMessageNotFoundError, 404),
    (ScheduleNotFoundError, 404),
    (QueuedMessageTakenError, 409),
    (AgentAlreadyRunningError, 409),
    (ToolCallAlreadyAnsweredError, 409),
    (AmbiguousToolCallError, 409),
    (RunNotActiveError, 409),
    (RunOnOtherVersionError, 409),
    (SessionAgentMismatchError, 409),
    (ContentTooLargeError, 413),
    (InvalidAnswerError, 422),
    (InvalidInputError, 422),
    (StateUpdateError, 422),
    (AgentDefinitionError, 422),
    (HelixShutDownError, 503),
)


def status_for(exc: Exception) -> int:
    for kind, status in STATUS_BY_ERROR:
        if isinstance(exc, kind):
            return status
    return 400


def describe_validation(errors: Sequence[Mapping[str, Any]]) -> str:
    """FastAPI's error list as one sentence: `body.session_id: Field required; ...`."""
    parts = []
    for error in errors:
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "body"
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{where}: {message}")
    return "; ".join(parts) or "Invalid request"


def install_error_handlers(app: FastAPI) -> None:
    async def helix_error(_: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=status_for(exc))

    async def request_invalid(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = list(exc.errors())
        return JSONResponse(
            {"detail": describe_validation(errors), "errors": _jsonable(errors)},
            status_code=422,
        )

    async def model_invalid(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ValidationError)
        return JSONResponse({"detail": describe_validation(list(exc.errors()))}, status_code=422)

    app.add_exception_handler(HelixError, helix_error)
    app.add_exception_handler(RequestValidationError, request_invalid)
    app.add_exception_handler(ValidationError, model_invalid)


def _jsonable(errors: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": e.get("type", "")}
        for e in errors
    ]
