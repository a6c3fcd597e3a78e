"""Resolve `provider:model` names to adapters.

Model names carry their provider (`anthropic:claude-sonnet-4-6`,
`openai:gpt-4o`, `openai-responses:o4-mini`). The registry maps a prefix to a
factory so tests and users can plug in their own providers. The built-in
factories import their adapter (and so its SDK) only when used: `import
helix_dbos` reaches this module, and importing the `anthropic` and `openai`
SDKs would add about 1.4 s to it (on top of about 0.6 s) for users of `MockLLM`
or of their own provider.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from helix_dbos.llm.base import LLMAdapter

#: factory(model_name_without_prefix, **kwargs) -> adapter
ProviderFactory = Callable[..., LLMAdapter]

_REGISTRY: dict[str, ProviderFactory] = {}


def register_provider(prefix: str, factory: ProviderFactory) -> None:
    """Make `prefix:<model>` resolve through `factory`; replaces an earlier one."""
    prefix = prefix.removesuffix(":")
    if not prefix or ":" in prefix:
        raise ValueError(f"Invalid provider prefix {prefix!r}: use a bare name such as 'openai'")
    _REGISTRY[prefix] = factory


def unregister_provider(prefix: str) -> None:
    """Forget `prefix` (mainly for tests)."""
    _REGISTRY.pop(prefix.removesuffix(":"), None)


def model_from_env() -> str | None:
    """A real model when the environment names one (`HELIX_MODEL=provider:model`) or holds
    a provider key (ANTHROPIC_API_KEY, then OPENAI_API_KEY); None otherwise, so that a
    script can fall back to `MockLLM`."""
    if os.environ.get("HELIX_MODEL"):
        return os.environ["HELIX_MODEL"]
    if os.environ.get("ANTHROPIC_API_KEY"):
        return "anthropic:claude-sonnet-4-6"
    if os.environ.get("OPENAI_API_KEY"):
        return "openai:gpt-4o"
    return None


def known_providers() -> list[str]:
    return sorted(_REGISTRY)


def resolve_adapter(model: str, **kwargs: Any) -> LLMAdapter:
    """The adapter for `provider:model`; `kwargs` go to the provider's factory.

    e.g. `resolve_adapter("openai:llama3.1", base_url="http://localhost:11434/v1")`.
    """
    provider, sep, name = model.partition(":")
    factory = _REGISTRY.get(provider) if sep else None
    if factory is None:
        known = ", ".join(known_providers())
        raise ValueError(
            f"Unknown LLM provider in model {model!r}: expected 'provider:model' with provider "
            f"one of: {known} (e.g. 'anthropic:claude-sonnet-4-6', 'openai:gpt-4o')"
        )
    if not name:
        raise ValueError(f"Model {model!r} names no model after '{provider}:'")
    return factory(name, **kwargs)


def _anthropic(model: str, **kwargs: Any) -> LLMAdapter:
    # Lazy: importing the SDK costs about 1.0 s (see the module docstring).
    from helix_dbos.llm.anthropic import AnthropicAdapter  # noqa: PLC0415

    return AnthropicAdapter(model, **kwargs)


def _openai(model: str, **kwargs: Any) -> LLMAdapter:
    # Lazy: importing the SDK costs about 0.4 s (see the module docstring).
    from helix_dbos.llm.openai import OpenAIAdapter  # noqa: PLC0415

    return OpenAIAdapter(model, **kwargs)


def _openai_responses(model: str, **kwargs: Any) -> LLMAdapter:
    # Lazy: it imports the openai SDK (see the module docstring).
    from helix_dbos.llm.openai_responses import OpenAIResponsesAdapter  # noqa: PLC0415

    return OpenAIResponsesAdapter(model, **kwargs)


register_provider("anthropic", _anthropic)
register_provider("openai", _openai)
register_provider("openai-responses", _openai_responses)
