"""The HTTP server: `create_app(helix, authenticate=...)` returns a FastAPI app.

Loaded on first use (PEP 562): the CLI's read commands use `helix_dbos.server.queries`
without paying for FastAPI. Each name is imported statically, so the architecture test
sees these imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from helix_dbos.server.app import create_app
    from helix_dbos.server.http.auth import Principal, bearer_token

__all__ = ["Principal", "bearer_token", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from helix_dbos.server.app import create_app  # noqa: PLC0415 - FastAPI on first use

        return create_app
    if name in ("Principal", "bearer_token"):
        from helix_dbos.server.http import auth  # noqa: PLC0415 - FastAPI on first use

        return getattr(auth, name)
    raise AttributeError(f"module 'helix_dbos.server' has no attribute {name!r}")
