"""A real MCP server for tests/test_mcp.py: `python mcp_server.py stdio|http PORT MARKERS`.

Every call it serves is appended to MARKERS, so a test can count calls.
"""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer

transport = sys.argv[1]
port = int(sys.argv[2]) if len(sys.argv) > 2 else 0
markers = sys.argv[3] if len(sys.argv) > 3 else None
server = MCPServer("helix-test")


def mark(line: str) -> None:
    if markers:
        with open(markers, "a") as f:
            f.write(line + "\n")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two numbers."""
    mark(f"add {a} {b}")
    return a + b


@server.tool()
def shout(text: str) -> str:
    """Upper-case a text."""
    mark(f"shout {text}")
    return text.upper()


@server.tool()
def explode() -> str:
    """Always fails."""
    mark("explode")
    raise ValueError("the server refused")


if __name__ == "__main__":
    if transport == "stdio":
        server.run("stdio")
    else:
        import anyio

        anyio.run(lambda: server.run_streamable_http_async(host="127.0.0.1", port=port))
