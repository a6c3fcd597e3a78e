"""The HTTP server: `create_app(helix, authenticate=...)` returns a FastAPI app.

Imported lazily, so the CLI's read-only commands do not pay for FastAPI.
"""

from __future__ import annotations

from typing import Any

__all__ = ["bearer_token", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from helix_dbos.server.app import create_app

        return create_app
    if name == "bearer_token":
        from helix_dbos.server.auth import bearer_token

        return bearer_token
    raise AttributeError(name)
