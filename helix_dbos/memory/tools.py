"""`__remember__` and `__recall__`: long-term memory as built-in tools, opt-in by name
like the Hyphen built-ins (`Agent(..., tools=["__remember__", "__recall__"])`).

Both act on the resource of the run's session (`execute(..., resource_id=...)`, or the
root session's for a sub-agent; the session itself when none is bound), so a user's
memories follow them from session to session. `__remember__` runs in workflow code:
saving and embedding are two DBOS steps, so a crash neither loses the memory nor
embeds it twice (the memory's id is the save step's). Empty or oversized text is
refused (`InvalidMemoryError`), which the model gets as the tool's error. Unlike the Hyphen toolkit they need no `__complete__`: an agent
ends its turn with text as usual. What the model hands in is stored with NUL and lone surrogates
replaced, as a model's text is everywhere.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from helix_dbos.definitions.tool import Tool, register_named_tool
from helix_dbos.definitions.tool_context import ToolContext
from helix_dbos.memory.manager import current_memory
from helix_dbos.store.storable import storable, storable_text

RECALL_MAX = 20


class RememberInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(min_length=1, description="The fact to remember, in one or two sentences")
    metadata: dict[str, Any] | None = Field(None, description="Optional structured tags")
    ttl_seconds: float | None = Field(
        None, gt=0, description="Forget it after this many seconds (default: never)"
    )


class RecallInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1, description="What to look for")
    limit: int = Field(5, ge=1, le=RECALL_MAX, description="How many memories at most")


def remember_tool() -> Tool:
    """`__remember__(text, metadata=None, ttl_seconds=None)`: save a long-term memory."""

    async def remember(
        ctx: ToolContext,
        text: str,
        metadata: dict[str, Any] | None = None,
        ttl_seconds: float | None = None,
    ) -> dict[str, Any]:
        memory = await current_memory().save(
            storable_text(text),
            session_id=ctx.session_id,
            metadata=storable(metadata or {}),
            ttl_seconds=ttl_seconds,
        )
        return {
            "remembered": True,
            "memory_id": memory.memory_id,
            "embedding_status": memory.embedding_status,
        }

    return Tool(
        "__remember__",
        remember,
        description="Save a fact about the user or the task to long-term memory; it is "
        "available in later conversations.",
        input_model=RememberInput,
        runs_in_workflow=True,
    )


def recall_tool() -> Tool:
    """`__recall__(query, limit=5)`: the most relevant long-term memories."""

    async def recall(ctx: ToolContext, query: str, limit: int = 5) -> dict[str, Any]:
        memory = current_memory()
        resource_id = await memory.resource_of(ctx.session_id)
        hits = await memory.search(storable_text(query), resource_id=resource_id, limit=limit)
        return {
            "memories": [
                {
                    "memory_id": hit.memory.memory_id,
                    "text": hit.memory.text,
                    "saved_at": hit.memory.created_at.isoformat()
                    if hit.memory.created_at
                    else None,
                    "metadata": hit.memory.metadata,
                }
                for hit in hits
            ]
        }

    return Tool(
        "__recall__",
        recall,
        description="Search long-term memory (facts saved with __remember__, in this or "
        "earlier conversations) for what is relevant to a query.",
        input_model=RecallInput,
    )


register_named_tool("__remember__", remember_tool)
register_named_tool("__recall__", recall_tool)
