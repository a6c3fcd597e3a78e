"""The contract between the runtime and any LLM provider.

An adapter turns an `LLMRequest` into one parsed `StepResult`. It is built
inside the LLM step (never serialized into a checkpoint) and may stream text
deltas through `on_text_delta` while the step's recorded result stays whole.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable

from pydantic import TypeAdapter

from helix_dbos.orchestration.types import LLMRequest, StepResult

TextDeltaCallback = Callable[[str], Awaitable[None]]

step_result_adapter: TypeAdapter[StepResult] = TypeAdapter(StepResult)


class LLMProviderError(Exception):
    """A provider call that failed.

    `retryable` errors (rate limits, 5xx, connection errors) are raised out of
    the LLM step so DBOS retries it with backoff; the others become an
    `ErrorStepResult` that fails the run with the provider's message.
    """

    def __init__(self, message: str, *, retryable: bool, status_code: int | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.status_code = status_code

    def __reduce__(self) -> tuple[object, ...]:
        # DBOS pickles a step's exception (and a retries-exceeded error carries the
        # attempts' errors): a recovered workflow must replay it, not a TypeError.
        return (_rebuild_provider_error, (str(self), self.retryable, self.status_code))


def _rebuild_provider_error(
    message: str, retryable: bool, status_code: int | None
) -> LLMProviderError:
    return LLMProviderError(message, retryable=retryable, status_code=status_code)


@runtime_checkable
class SelfChecking(Protocol):
    """An adapter that can tell before the first call why that call would fail.

    `launch()` and `execute()` ask it, so a missing API key is an error naming the
    variable at start-up, not a failed run with a zero-token usage row a second later.
    """

    def configuration_problem(self) -> str | None: ...


@runtime_checkable
class LLMAdapter(Protocol):
    async def generate_step(
        self, request: LLMRequest, on_text_delta: TextDeltaCallback | None = None
    ) -> StepResult: ...
