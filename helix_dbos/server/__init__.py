"""The HTTP server: `create_app(helix, authenticate=...)` returns a FastAPI app."""

from helix_dbos.server.app import create_app
from helix_dbos.server.auth import Principal, bearer_token

__all__ = ["Principal", "bearer_token", "create_app"]
