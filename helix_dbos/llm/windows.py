"""Models' context windows, from the `genai-prices` table (the data pricing uses), for
the default history budget (`orchestration/history`). A model it does not know has no
window: its input is not compacted unless the agent sets a budget."""

from __future__ import annotations

from functools import lru_cache

from genai_prices import data

# helix's provider prefixes, as genai-prices names the provider.
_PROVIDER_IDS = {"openai": "openai", "openai-responses": "openai", "anthropic": "anthropic"}


@lru_cache(maxsize=128)
def context_window(model: str) -> int | None:
    """The window of `provider:model` in tokens, or None when the table lacks it."""
    provider, _, name = model.partition(":")
    provider_id = _PROVIDER_IDS.get(provider)
    if not name or provider_id is None:
        return None
    for entry in data.providers:
        if entry.id == provider_id:
            found = entry.find_model(name)
            return found.context_window if found is not None else None
    return None
