"""The HTTP server: `create_app(helix, authenticate=...)` returns a FastAPI app.

Loaded on first use (PEP 562): the CLI's read commands use `helix_dbos.server.queries`
without paying for FastAPI.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from helix_dbos.server.app import create_app
    from helix_dbos.server.http.auth import Principal, bearer_token

_EXPORTS = {
    "create_app": "helix_dbos.server.app",
    "bearer_token": "helix_dbos.server.http.auth",
    "Principal": "helix_dbos.server.http.auth",
}

__all__ = ["Principal", "bearer_token", "create_app"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'helix_dbos.server' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
