"""What the sync and async clients share: settings, headers, answers, reconnection."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

from helix_dbos.client.calls import Call
from helix_dbos.client.errors import StreamError, status_error
from helix_dbos.client.sse import SSEEvent
from helix_dbos.streaming.chunks import StreamChunk

# Statuses worth another try: the server is restarting or briefly overloaded.
RETRY_STATUSES = frozenset({502, 503, 504})


@dataclass(frozen=True)
class ClientOptions:
    base_url: str
    token: str | None
    timeout: float
    max_retries: int
    retry_delay: float
    # A stream idles up to the server's keep-alive (15 s by default) between events;
    # a read that waits longer than this takes the connection for dead and resumes.
    stream_read_timeout: float
    max_reconnects: int
    turn_timeout: float  # a chat call waits for a whole turn of the agent

    def timeout_of(self, call: Call[Any]) -> float:
        return self.turn_timeout if call.runs_a_turn else self.timeout

    def headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def backoff(self, attempt: int) -> float:
        return float(min(self.retry_delay * 2**attempt, 10.0))

    def stream_timeout(self) -> httpx.Timeout:
        return httpx.Timeout(self.timeout, read=self.stream_read_timeout)


def retryable(call: Call[Any]) -> bool:
    """Sent again after no answer or a 502-504: reads, and starts that carry a key."""
    if call.method == "GET":
        return True
    body = call.body
    return call.path == "/start" and getattr(body, "idempotency_key", None) is not None


def parse(call: Call[Any], response: httpx.Response) -> Any:
    """The answer as the call's model, or the exception for an error status."""
    if call.raw and response.status_code < 400:
        return call.parse(response.content)
    text = response.text
    try:
        body = json.loads(text) if text else None
    except ValueError:
        body = None
    if response.status_code >= 400:
        raise status_error(response.status_code, body, text)
    return call.parse(body)


def stream_headers(last_seq: int) -> dict[str, str]:
    headers = {"Accept": "text/event-stream"}
    if last_seq:
        headers["Last-Event-ID"] = str(last_seq)
    return headers


def event_chunk(event: SSEEvent) -> StreamChunk | None:
    """A chunk event's chunk; None for `end`; raises for `error`."""
    if event.event == "end":
        return None
    if event.event == "error":
        try:
            message = json.loads(event.data).get("error", event.data)
        except (ValueError, AttributeError):
            message = event.data
        raise StreamError(f"the server ended the stream with an error: {message}")
    return StreamChunk.model_validate_json(event.data)


class Reconnect(Exception):
    """A stream answered 502-504: resumed like a dropped connection."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def json_body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None
