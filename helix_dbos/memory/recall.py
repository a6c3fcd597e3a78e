"""Semantic recall: the top-k memories relevant to the latest user message, added to
the system prompt before each model call (Mastra's semantic recall).

It is a `before_llm_call` hook, so it runs inside the `helix.llm` step. The memories it
injects are recorded in `helix.memory_recalls` under (run, step) the first time; any
later attempt of that step (a provider retry, or the step re-run after a crash) injects
the recorded ones, with the recorded text, even if memories changed in between.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from helix_dbos.definitions.hooks import AgentHooks, LLMCallEvent, fire
from helix_dbos.memory import store
from helix_dbos.memory.manager import current_memory, memory_texts
from helix_dbos.memory.types import SearchMode
from helix_dbos.orchestration.types import LLMRequest, Message

DEFAULT_HEADING = "Relevant memories"


def latest_user_text(request: LLMRequest) -> str | None:
    for message in reversed(request.messages):
        if message.role == "user" and message.content:
            return message.content
    return None


def memory_section(heading: str, memories: list[dict[str, str]]) -> str:
    lines = "\n".join(f"- {m['text']}" for m in memories)
    return f"## {heading}\n{lines}"


def inject(request: LLMRequest, section: str) -> None:
    """Append `section` to the request's system prompt (or make it the prompt)."""
    if request.messages and request.messages[0].role == "system":
        head = request.messages[0]
        head.content = f"{head.content}\n\n{section}" if head.content else section
    else:
        request.messages.insert(0, Message(role="system", content=section))


async def recalled(
    run_id: str, step: int, session_id: str, query: str | None, top_k: int, mode: SearchMode
) -> list[dict[str, str]]:
    """This step's memories: the recorded ones, else found now and recorded."""
    memory = current_memory()
    async with memory.engine.connect() as conn:
        known = await store.recorded_recall(conn, run_id, step)
    if known is not None:
        return known
    found: list[dict[str, str]] = []
    if query:
        resource_id = await memory.resource_of(session_id)
        found = memory_texts(
            await memory.search(query, resource_id=resource_id, limit=top_k, mode=mode)
        )
    async with memory.engine.begin() as conn:
        return await store.record_recall(conn, run_id, step, found)


def recall_hooks(
    hooks: AgentHooks | None = None,
    *,
    top_k: int = 3,
    mode: SearchMode = "hybrid",
    heading: str = DEFAULT_HEADING,
) -> AgentHooks:
    """`hooks` (or none) plus semantic recall before every model call. Your own
    `before_llm_call` runs after the injection and sees the injected prompt.

    A `before_llm_call` of yours that changes the session state makes the step rebuild
    its request from the state, without the injected section: change the state in
    another hook (`on_agent_start`, `after_tool`) instead."""
    if top_k < 1:
        raise ValueError("top_k must be at least 1")
    theirs = (hooks or AgentHooks()).before_llm_call

    async def before_llm_call(event: LLMCallEvent) -> None:
        c = event.context
        query = latest_user_text(event.request)
        memories = await recalled(c.run_id, c.step, c.session_id, query, top_k, mode)
        if memories:
            inject(event.request, memory_section(heading, memories))
        await fire(theirs, event)

    hook: Callable[[Any], Awaitable[None]] = before_llm_call
    return replace(hooks or AgentHooks(), before_llm_call=hook)
