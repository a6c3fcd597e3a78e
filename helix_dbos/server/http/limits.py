"""Connection limits for uvicorn that it lacks: a deadline for a request's headers.

uvicorn's h11 protocol waits for headers forever (its keep-alive timeout stops at the
first byte), so a client sending a header line now and then holds a connection and
its memory indefinitely (slowloris). `with_header_timeout` closes a connection whose
request headers are not complete within the timeout, on a new connection and between
requests of a kept-alive one.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # uvicorn loads when `serve` runs, not for the CLI's --help
    from uvicorn.protocols.http.h11_impl import H11Protocol


@dataclass(frozen=True)
class ServeLimits:
    """What `helix-dbos serve` gives uvicorn (documented in docs/http.md)."""

    limit_concurrency: int = 512  # connections + tasks; past it uvicorn answers 503
    timeout_keep_alive: int = 5  # seconds an idle kept-alive connection stays open
    header_timeout: float = 10.0  # seconds for a request's headers to arrive
    backlog: int = 1024


def with_header_timeout(seconds: float) -> type[H11Protocol]:
    """An h11 protocol class closing connections whose headers take over `seconds`."""
    from uvicorn.protocols.http.h11_impl import H11Protocol  # noqa: PLC0415 - see above

    class HeaderTimeoutH11Protocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm(None)

        def data_received(self, data: bytes) -> None:
            if self._header_timer is None and self._between_requests():
                self._arm(self.cycle)
            super().data_received(data)

        def connection_lost(self, exc: Exception | None) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None
            super().connection_lost(exc)

        def _between_requests(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _arm(self, cycle: Any) -> None:
            self._header_timer = self.loop.call_later(seconds, self._headers_late, cycle)

        def _headers_late(self, cycle: Any) -> None:
            self._header_timer = None
            if self.transport.is_closing():
                return
            if self.cycle is cycle:  # no request began since the timer was set
                self.transport.close()
            elif self._between_requests():  # one finished meanwhile: time the next one
                self._arm(self.cycle)

    return HeaderTimeoutH11Protocol
