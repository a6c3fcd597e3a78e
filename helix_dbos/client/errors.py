"""The client's exceptions: one per HTTP status class, named as in the OpenAI SDK.

Every error from the server carries its `detail` (what went wrong, what to do), the
status code and the parsed body; a request that got no answer at all (the server is
down, the connection dropped) is an `APIConnectionError`.
"""

from __future__ import annotations

from typing import Any


class HelixClientError(Exception):
    """Base of every error this client raises."""


class APIConnectionError(HelixClientError):
    """No answer: the server could not be reached, or the connection dropped."""


class APIStatusError(HelixClientError):
    """The server answered with a 4xx or 5xx status."""

    status_code: int = 0

    def __init__(self, status_code: int, detail: str, body: Any = None) -> None:
        super().__init__(f"HTTP {status_code}: {detail}")
        self.status_code = status_code
        self.detail = detail
        self.body = body


class BadRequestError(APIStatusError):
    """400: the request cannot be applied as it is."""


class AuthenticationError(APIStatusError):
    """401: no token, or a wrong one."""


class PermissionDeniedError(APIStatusError):
    """403: authenticated, but not allowed (another principal's session)."""


class NotFoundError(APIStatusError):
    """404: no such session, run, agent or tool call (or one you may not see)."""


class ConflictError(APIStatusError):
    """409: the session is running already, the call was answered already, ..."""


class PayloadTooLargeError(APIStatusError):
    """413: the body is over the server's limit."""


class UnprocessableEntityError(APIStatusError):
    """422: a malformed request, or a chat run that ended without completing."""


class RateLimitError(APIStatusError):
    """429."""


class InternalServerError(APIStatusError):
    """5xx: the server failed (500), or is overloaded or unavailable (503)."""


class StreamError(HelixClientError):
    """The server ended a stream with an `error` event."""


_BY_STATUS: dict[int, type[APIStatusError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: UnprocessableEntityError,
    429: RateLimitError,
}


def status_error(status_code: int, body: Any, text: str) -> APIStatusError:
    """The exception for an error answer, with the server's `detail` as its message."""
    detail = body.get("detail") if isinstance(body, dict) else None
    if not isinstance(detail, str):
        detail = text.strip() or f"HTTP {status_code}"
    kind = _BY_STATUS.get(status_code)
    if kind is None:
        kind = InternalServerError if status_code >= 500 else APIStatusError
    return kind(status_code, detail, body)
