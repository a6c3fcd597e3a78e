"""LLM adapters: the mock for tests and the real providers."""

from helix_dbos.llm.base import LLMAdapter, LLMProviderError
from helix_dbos.llm.mock import MockLLM

__all__ = ["LLMAdapter", "LLMProviderError", "MockLLM"]
