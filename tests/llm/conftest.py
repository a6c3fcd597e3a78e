"""Fixtures of the provider tests: the official SDKs over recording transports."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import pytest

from helix_dbos.llm.anthropic import AnthropicAdapter
from helix_dbos.llm.openai import OpenAIAdapter
from helix_dbos.llm.providers import register_provider, unregister_provider


@pytest.fixture
def wire_provider() -> Iterator[dict[str, Any]]:
    """`openai-wire:` and `anthropic-wire:` providers over recording transports: a test
    puts a `wire.Recorder` under "openai" or "anthropic" before its run calls the model."""
    state: dict[str, Any] = {}

    def openai_factory(model: str, **_: Any) -> OpenAIAdapter:
        client = httpx.AsyncClient(transport=httpx.MockTransport(state["openai"].handle))
        return OpenAIAdapter(model, api_key="sk-test", http_client=client)

    def anthropic_factory(model: str, **_: Any) -> AnthropicAdapter:
        client = httpx2.AsyncClient(transport=httpx2.MockTransport(state["anthropic"].handle))
        return AnthropicAdapter(model, api_key="sk-ant-test", http_client=client)

    register_provider("openai-wire", openai_factory)
    register_provider("anthropic-wire", anthropic_factory)
    yield state
    unregister_provider("openai-wire")
    unregister_provider("anthropic-wire")
