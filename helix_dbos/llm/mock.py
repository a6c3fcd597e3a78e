"""A scripted LLM for tests and examples: the only mocked part of the system.

Responses are typed step results or seed-001 dicts, queued globally or per
agent, or produced by a function of the request. A function keeps crash tests
deterministic: a recovered process answers the same without a shared queue.
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from helix_dbos.llm.base import TextDeltaCallback, step_result_adapter
from helix_dbos.orchestration.types import (
    LLMRequest,
    LLMUsage,
    StepResult,
    TextStepResult,
    ToolCallsStepResult,
)

Responder = Callable[
    [LLMRequest], "StepResult | dict[str, Any] | Awaitable[StepResult | dict[str, Any]]"
]

#: The step results whose text is streamed to `on_text_delta`.
_WITH_CONTENT = (TextStepResult, ToolCallsStepResult)

_CAMEL = {
    "toolCalls": "tool_calls",
    "subAgentCalls": "sub_agent_calls",
    "stopReason": "stop_reason",
    "shouldStop": "should_stop",
}


def parse_step_result(value: StepResult | dict[str, Any]) -> StepResult:
    """Accept a typed result or a seed-001 dict (snake_case or camelCase keys)."""
    if not isinstance(value, dict):
        return value
    data = {_CAMEL.get(k, k): v for k, v in value.items()}
    if data.get("sub_agent_calls"):
        data["sub_agent_calls"] = [
            {("agent_type" if k == "agentType" else k): v for k, v in call.items()}
            for call in data["sub_agent_calls"]
        ]
    if data.get("type") == "tool_calls":
        data.setdefault("stop_reason", "tool_use")
        data.setdefault("tool_calls", [])
    if data.get("type") == "text":
        data.setdefault("stop_reason", "end_turn")
        data.setdefault("content", "")
    return step_result_adapter.validate_python(data)


class MockLLM:
    """Scripted responses; records every request it was asked."""

    def __init__(
        self,
        responder: Responder | Iterable[StepResult | dict[str, Any]] | None = None,
        *,
        model: str = "mock",
    ) -> None:
        """`responder` is a function of the request, or the responses to queue in order
        (`MockLLM([{"type": "text", "content": "hi"}])`); anything else raises here."""
        self._responder: Responder | None = None
        self._queue: deque[StepResult] = deque()
        self._per_agent: dict[str, deque[StepResult]] = {}
        self.model = model
        self.inputs: list[LLMRequest] = []
        if callable(responder):
            self._responder = responder
        elif isinstance(responder, (list, tuple)):
            self.add_responses(*responder)
        elif responder is not None:
            raise TypeError(
                "MockLLM(...) takes a function of the request or a list of responses, "
                f"not {type(responder).__name__}"
            )

    def add_response(
        self, response: StepResult | dict[str, Any], *, agent: str | None = None
    ) -> MockLLM:
        parsed = parse_step_result(response)
        if agent is None:
            self._queue.append(parsed)
        else:
            self._per_agent.setdefault(agent, deque()).append(parsed)
        return self

    def add_responses(
        self, *responses: StepResult | dict[str, Any], agent: str | None = None
    ) -> MockLLM:
        for response in responses:
            self.add_response(response, agent=agent)
        return self

    def set_responder(self, responder: Responder | None) -> None:
        self._responder = responder

    def get_last_input(self) -> LLMRequest:
        if not self.inputs:
            raise LookupError("MockLLM has not been called yet")
        return self.inputs[-1]

    @property
    def call_count(self) -> int:
        return len(self.inputs)

    def reset(self) -> None:
        self._queue.clear()
        self._per_agent.clear()
        self.inputs.clear()

    async def generate_step(
        self, request: LLMRequest, on_text_delta: TextDeltaCallback | None = None
    ) -> StepResult:
        self.inputs.append(request)
        result = await self._next(request)
        if result.usage is None:
            result = result.model_copy(
                update={"usage": _estimate_usage(request, result, self.model)}
            )
        content = result.content if isinstance(result, _WITH_CONTENT) else None
        if on_text_delta is not None and content:
            await on_text_delta(content)
        return result

    async def _next(self, request: LLMRequest) -> StepResult:
        queue = self._per_agent.get(request.agent_name)
        if queue:
            return queue.popleft()
        if self._queue:
            return self._queue.popleft()
        if self._responder is not None:
            produced = self._responder(request)
            if inspect.isawaitable(produced):
                produced = await produced
            return parse_step_result(produced)
        raise LookupError(
            f"MockLLM has no scripted response left for agent '{request.agent_name}'; "
            "add_response() more results or pass a responder function"
        )


def _estimate_usage(request: LLMRequest, result: StepResult, model: str) -> LLMUsage:
    """Deterministic token counts (about four characters a token) so usage rows are real."""
    prompt_chars = sum(len(m.content or "") for m in request.messages)
    try:
        output = result.model_dump_json(exclude={"usage"})
    except ValueError:  # a lone surrogate cannot be encoded as JSON: count characters
        output = str(result.model_dump(exclude={"usage"}))
    return LLMUsage(
        model=model, input_tokens=max(1, prompt_chars // 4), output_tokens=max(1, len(output) // 4)
    )
