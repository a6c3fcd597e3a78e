"""The MCP endpoint in the OpenAPI document.

`/mcp` is an ASGI app (the SDK's streamable HTTP transport), not a FastAPI route, so
FastAPI cannot describe it; this adds its entry by hand: one JSON-RPC endpoint whose
methods are MCP's (see docs/protocols/mcp.md), behind the same authentication.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

_JSON_RPC = {
    "type": "object",
    "description": "A JSON-RPC 2.0 message of the Model Context Protocol",
    "properties": {
        "jsonrpc": {"type": "string", "enum": ["2.0"]},
        "id": {"type": ["string", "integer"]},
        "method": {
            "type": "string",
            "examples": ["tools/list", "tools/call", "tasks/get", "tasks/result", "tasks/cancel"],
        },
        "params": {"type": "object"},
    },
    "required": ["jsonrpc"],
}

_DESCRIPTION = (
    "The Model Context Protocol over streamable HTTP (the official `mcp` SDK): each agent "
    "chosen with `create_app(mcp_agents=...)` or `helix-dbos serve --mcp` is a tool; "
    "`tools/call` runs it, as an MCP task (task id = run id) when the client speaks the "
    "tasks extension (`tasks/get`, `tasks/result`, `tasks/update`, `tasks/cancel`, "
    "`tasks/list`). Errors are JSON-RPC errors or tool errors. See docs/protocols/mcp.md."
)


def _operation(summary: str, body: bool) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "tags": ["mcp"],
        "summary": summary,
        "description": _DESCRIPTION,
        "responses": {
            "200": {
                "description": "A JSON-RPC response (application/json) or an SSE stream of them",
                "content": {"application/json": {"schema": _JSON_RPC}, "text/event-stream": {}},
            },
            "202": {"description": "A notification or response was accepted"},
            "401": {"description": "The authenticate hook refused the request"},
            "413": {"description": "Body larger than the limit"},
        },
    }
    if body:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": _JSON_RPC}},
        }
    return operation


def mcp_path_item() -> dict[str, Any]:
    return {
        "post": _operation("MCP: send a JSON-RPC request or notification", body=True),
        "get": _operation("MCP: the session's server-to-client stream (handshake era)", body=False),
        "delete": _operation("MCP: end a session (handshake era)", body=False),
    }


def document_mcp(app: FastAPI, path: str) -> None:
    """Add `path` to the app's OpenAPI document (built once, then cached by FastAPI)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        schema = build()
        schema.setdefault("paths", {}).setdefault(path, mcp_path_item())
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
