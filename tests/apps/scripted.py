"""Scripted model replies (`MockLLM.add_responses`, or a MockLLM's function): one copy for
the test apps and, through `helpers`, the tests."""

from __future__ import annotations

from typing import Any


def calls(
    *items: tuple[str, str, dict[str, Any]],
    content: str | None = None,
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A reply that calls tools: (id, name, arguments) each, with assistant text beside
    them when `content` is given, and its `usage`."""
    response: dict[str, Any] = {
        "type": "tool_calls",
        "tool_calls": [{"id": i, "name": n, "arguments": a} for i, n, a in items],
    }
    if content:
        response["content"] = content
    if usage is not None:
        response["usage"] = usage
    return response


def call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A reply that calls one tool."""
    return calls((call_id, name, arguments))


def text(content: str) -> dict[str, Any]:
    """A reply that ends with text."""
    return {"type": "text", "content": content}
