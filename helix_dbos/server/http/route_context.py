"""What every route needs: the executor, the default agent, the input and stream limits."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from fastapi import HTTPException

from helix_dbos.api.models import ErrorResponse
from helix_dbos.facade.helix import HelixDBOS
from helix_dbos.server.http.auth import Authenticate
from helix_dbos.server.http.streams import StreamSlots
from helix_dbos.store.storable import check_storable

# Documented on every route that can produce them.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "The authenticate hook refused the request"},
    403: {"model": ErrorResponse, "description": "Not a session this principal may use"},
    404: {"model": ErrorResponse, "description": "Unknown session, run, agent or tool call"},
    409: {"model": ErrorResponse, "description": "Conflicts with the session's current state"},
    408: {"model": ErrorResponse, "description": "The body did not arrive in time"},
    413: {"model": ErrorResponse, "description": "Body or tool result larger than the limit"},
    422: {
        "model": ErrorResponse,
        "description": "Malformed body, JSON nested too deep, id too long or bad answer",
    },
}
# A route that streams Server-Sent Events, and its refusal when the stream slots are full.
SSE_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {"schema": {"type": "string"}}}},
    503: {
        "model": ErrorResponse,
        "description": "Too many open streams (per server or per session); see Retry-After",
    },
}


@dataclass(frozen=True)
class ServerContext:
    helix: HelixDBOS
    default_agent: str | None
    max_id_length: int
    max_result_bytes: int
    keepalive_seconds: float
    authenticate: Authenticate | None = None
    cookie_max_age: int = 12 * 3600
    streams: StreamSlots = field(default_factory=StreamSlots)
    max_stream_seconds: float = 3600.0

    def check_ids(self, **ids: str | None) -> None:
        """Ids are bounded so a client cannot make the database index huge strings, and
        storable (no NUL, no lone surrogate: a 422 naming the field)."""
        check_storable(**ids)
        for name, value in ids.items():
            if value is not None and len(value) > self.max_id_length:
                raise HTTPException(
                    status_code=422,
                    detail=f"{name} is {len(value)} characters long; the limit is {self.max_id_length}",
                )

    def check_result_size(self, name: str, value: Any) -> None:
        size = len(json.dumps(value, default=str).encode())
        if size > self.max_result_bytes:
            raise HTTPException(
                status_code=413,
                detail=f"{name} is {size} bytes; the limit is {self.max_result_bytes} bytes",
            )
