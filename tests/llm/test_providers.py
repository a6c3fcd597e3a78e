"""`provider:model` resolution and the provider registry."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from helix_dbos.llm.anthropic import AnthropicAdapter
from helix_dbos.llm.openai import OpenAIAdapter
from helix_dbos.llm.providers import (
    known_providers,
    register_provider,
    resolve_adapter,
    unregister_provider,
)
from helix_dbos.orchestration.types import LLMRequest, StepResult, TextStepResult


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def test_anthropic_model_resolves_to_anthropic_adapter() -> None:
    adapter = resolve_adapter("anthropic:claude-sonnet-4-5", api_key="k")
    assert isinstance(adapter, AnthropicAdapter)
    assert adapter.model == "claude-sonnet-4-5"


def test_openai_model_takes_base_url_kwarg() -> None:
    adapter = resolve_adapter("openai:llama3.1:8b", base_url="http://localhost:11434/v1")
    assert isinstance(adapter, OpenAIAdapter)
    assert adapter.model == "llama3.1:8b"  # only the provider prefix is stripped
    assert adapter.base_url == "http://localhost:11434/v1"
    assert adapter.compatible_server is True


def test_openai_base_url_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://vllm:8000/v1")
    adapter = resolve_adapter("openai:Qwen/Qwen2.5-7B-Instruct")
    assert isinstance(adapter, OpenAIAdapter)
    assert adapter.base_url == "http://vllm:8000/v1"


def test_plain_openai_is_not_a_compatible_server() -> None:
    adapter = resolve_adapter("openai:gpt-4o")
    assert isinstance(adapter, OpenAIAdapter) and adapter.compatible_server is False


@pytest.mark.parametrize("model", ["gemini:gemini-2.5-pro", "gpt-4o", ":gpt-4o"])
def test_unknown_provider_lists_known_ones(model: str) -> None:
    with pytest.raises(ValueError) as info:
        resolve_adapter(model)
    assert "anthropic" in str(info.value) and "openai" in str(info.value)
    assert repr(model) in str(info.value)


def test_empty_model_name_is_rejected() -> None:
    with pytest.raises(ValueError, match="names no model"):
        resolve_adapter("openai:")


class _Echo:
    def __init__(self, model: str, **kwargs: Any) -> None:
        self.model = model
        self.kwargs = kwargs

    async def generate_step(self, request: LLMRequest, on_text_delta: Any = None) -> StepResult:
        return TextStepResult(content=self.model)


@pytest.fixture
def mock_provider() -> Iterator[None]:
    register_provider("mock", _Echo)
    yield
    unregister_provider("mock")


def test_registered_provider_resolves_with_kwargs(mock_provider: None) -> None:
    adapter = resolve_adapter("mock:scripted", seed=3)
    assert isinstance(adapter, _Echo)
    assert (adapter.model, adapter.kwargs) == ("scripted", {"seed": 3})
    assert "mock" in known_providers()


def test_unregistered_provider_is_gone() -> None:
    register_provider("temp:", _Echo)  # a trailing colon is tolerated
    assert "temp" in known_providers()
    unregister_provider("temp")
    assert "temp" not in known_providers()


@pytest.mark.parametrize("prefix", ["", "a:b"])
def test_invalid_prefix_is_rejected(prefix: str) -> None:
    with pytest.raises(ValueError, match="Invalid provider prefix"):
        register_provider(prefix, _Echo)
