"""What an LLM call cost, in US dollars, from the `genai-prices` table.

The table is maintained by the genai-prices project (pydantic), not by helix: its
prices cover cache reads and writes and reasoning tokens where a provider prices
them apart. Its `input_tokens` means every input token, cached or not, exactly as
`helix.usage.input_tokens` does (migration 0006), so usage passes through unchanged.
A model the table does not know costs `None`, never a guess.
"""

from __future__ import annotations

from decimal import Decimal
from functools import lru_cache

from genai_prices import Usage, calc_price

from helix_dbos.orchestration.types import LLMUsage

# helix's provider prefixes, as genai-prices names the provider (others: by model name).
_PROVIDER_IDS = {"openai": "openai", "openai-responses": "openai", "anthropic": "anthropic"}


def llm_cost_usd(usage: LLMUsage, provider: str | None = None) -> Decimal | None:
    """The call's price, or `None` when no model was reported or the table lacks it."""
    if not usage.model:
        return None
    if not (usage.input_tokens or usage.output_tokens):
        return Decimal(0)
    try:
        price = calc_price(
            Usage(
                input_tokens=usage.input_tokens,
                cache_read_tokens=usage.cache_read_tokens,
                cache_write_tokens=usage.cache_write_tokens,
                output_tokens=usage.output_tokens,
                output_reasoning_tokens=usage.reasoning_tokens,
            ),
            usage.model,
            provider_id=_provider_id(provider),
        )
    except LookupError:
        return None
    return price.total_price


@lru_cache(maxsize=64)
def _provider_id(provider: str | None) -> str | None:
    return _PROVIDER_IDS.get(provider or "")
