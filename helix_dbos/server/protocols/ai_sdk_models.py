"""What `useChat` sends (the AI SDK's `DefaultChatTransport` body) and the error it reads.

Only the fields helix uses are typed; the rest of a UI message passes through unread.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class UIPart(BaseModel):
    """One part of a UI message: `text`, a tool part (`tool-<name>` or `dynamic-tool`)..."""

    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None
    toolCallId: str | None = None
    state: str | None = None
    output: Any = None
    errorText: str | None = None
    approval: dict[str, Any] | None = None

    @property
    def is_tool(self) -> bool:
        return self.toolCallId is not None and (
            self.type.startswith("tool-") or self.type == "dynamic-tool"
        )


class UIMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str = ""
    role: Literal["user", "assistant", "system"]
    parts: list[UIPart] = Field(default_factory=list)


class AISDKChatRequest(BaseModel):
    """`useChat`'s request: `id` is the chat id, which is the helix session id."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(min_length=1, description="The chat id: the helix session id")
    messages: list[UIMessage] = Field(
        min_length=1,
        description="The chat's UI messages; helix reads the last one (the session's "
        "history lives in helix)",
    )
    trigger: str | None = Field(
        None, description="`submit-message` (regenerating a message is not supported)"
    )
    messageId: str | None = None
    agent: str | None = Field(
        None,
        description="The agent to run; default: the session's own, else the server's default_agent",
    )


class AISDKError(BaseModel):
    """The UI message stream's own error shape (`{"type": "error", "errorText": ...}`)."""

    type: Literal["error"] = "error"
    errorText: str


def request_schema() -> dict[str, Any]:
    """`AISDKChatRequest`'s JSON schema with its `$defs` inlined: the route documents its
    body through `openapi_extra`, where a `#/$defs/...` reference resolves against the
    whole OpenAPI document (ReDoc and other renderers then fail)."""
    schema = AISDKChatRequest.model_json_schema()
    defs: dict[str, Any] = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, list):
            return [inline(item) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return inline(defs[ref.removeprefix("#/$defs/")])  # the models are not recursive
        return {key: inline(value) for key, value in node.items()}

    result: dict[str, Any] = inline(schema)
    return result
