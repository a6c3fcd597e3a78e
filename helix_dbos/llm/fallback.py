"""Fallback models: the next model answers when the agent's own is down.

`LLMConfig(fallback=[...])` names models tried in order once the primary's attempts are
spent on provider errors (`LLMProviderError(retryable=True)`: rate limits, 5xx,
overloaded, lost connections). Never on a database error or on an error of the request
itself: the caller only comes here with a retryable provider error, and a fallback's
non-retryable error is its answer (the run fails with its message).

The runtime calls this inside its one LLM step, so the model that answered is part of
the step's checkpoint (`LLMUsage.fallback`): a replay returns the same answer and never
calls a model again, nor switches to another.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from helix_dbos.llm.base import LLMProviderError
from helix_dbos.orchestration.types import LLMRequest, LLMUsage, StepResult

logger = logging.getLogger(__name__)

#: call(model, request): one call of `model`; raises only a retryable LLMProviderError.
ModelCall = Callable[[str, LLMRequest], Awaitable[StepResult]]


def provider_of(model: str) -> str:
    """`openai` for `openai:gpt-4o` (and `mock` for `mock`)."""
    return model.split(":", 1)[0]


def fallback_request(request: LLMRequest, model: str) -> LLMRequest:
    """The request as `model` is asked: another provider's options (Anthropic's
    `thinking`, say) would be refused by it, so they stay with their provider."""
    update: dict[str, object] = {"model": model}
    if provider_of(model) != provider_of(request.model):
        update["provider_options"] = {}
    return request.model_copy(update=update)


async def answer_with_fallbacks(
    models: Sequence[str], request: LLMRequest, failed: LLMProviderError, call: ModelCall
) -> StepResult:
    """The first answer of `models`, in order, after the primary `failed`; its usage
    names the model (`LLMUsage.fallback`). If every one fails retryably, the error
    raised names each model's failure, and stays retryable like the primary's."""
    errors = [f"{request.model}: {failed}"]
    for model in models:
        try:
            result = await call(model, fallback_request(request, model))
        except LLMProviderError as exc:
            logger.warning("fallback model %s failed too: %s", model, exc)
            errors.append(f"{model}: {exc}")
            continue
        usage = (result.usage or LLMUsage()).model_copy(update={"fallback": model})
        return result.model_copy(update={"usage": usage})
    raise LLMProviderError(
        "every model failed: " + "; ".join(errors),
        retryable=True,
        status_code=failed.status_code,
    )
