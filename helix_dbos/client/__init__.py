"""`HelixClient` and `AsyncHelixClient`: a helix server's HTTP API from Python.

```python
from helix_dbos.client import AsyncHelixClient

async with AsyncHelixClient("http://127.0.0.1:8000", token="...") as helix:
    run = await helix.start("assistant", "Hello")
    async for chunk in helix.stream(run.session_id, run_id=run.run_id):
        ...
```

Each method is written once, in the async client (`aio.py`, `aio_schedules.py`):
`scripts/unasync.py` makes `sync.py` and `sync_schedules.py` from them by token
substitution (`async def` to `def`, `await` dropped, `AsyncHelixClient` to
`HelixClient`, ...), and `tests/test_client_unasync.py` fails when they are not current.

The two clients load on first use (PEP 562), with httpx: the runtime imports the error
classes here for its remote children, and a process that never calls a remote server
(a worker, a crash test's app) does not pay for httpx.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from helix_dbos.client.errors import (
    APIConnectionError,
    APIStatusError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    HelixClientError,
    InternalServerError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitError,
    StreamError,
    UnprocessableEntityError,
)
from helix_dbos.lazy_names import lazy_getattr

if TYPE_CHECKING:
    from helix_dbos.client.aio import AsyncHelixClient
    from helix_dbos.client.sync import HelixClient

_CLIENTS = {"AsyncHelixClient": "helix_dbos.client.aio", "HelixClient": "helix_dbos.client.sync"}

__all__ = [
    "APIConnectionError",
    "APIStatusError",
    "AsyncHelixClient",
    "AuthenticationError",
    "BadRequestError",
    "ConflictError",
    "HelixClient",
    "HelixClientError",
    "InternalServerError",
    "NotFoundError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RateLimitError",
    "StreamError",
    "UnprocessableEntityError",
]


__getattr__ = lazy_getattr(__name__, _CLIENTS, globals())


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
