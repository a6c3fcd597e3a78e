"""What every provider SDK adapter does alike.

The Anthropic and OpenAI adapters differ in how they speak to their API, not in
how they hold their SDK client (built on first use, once per event loop, never
pickled), forward streamed text, pick strict tools or report a strict schema the
API refused; those live here once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar

from helix_dbos.llm.base import TextDeltaCallback
from helix_dbos.llm.capabilities import (
    ModelCapabilities,
    StrictDialect,
    StrictSchemas,
    describe_strict_rejection,
)
from helix_dbos.orchestration.types import FINISH_TOOL_NAME, LLMRequest, ToolSpec

logger = logging.getLogger(__name__)

ClientT = TypeVar("ClientT")
ToolT = TypeVar("ToolT")


class SDKAdapter(Generic[ClientT]):
    """Settings shared by the SDK adapters and their SDK client, built lazily.

    Cheap to build: the SDK client is created on first use (per event loop, since
    an SDK client is bound to the loop it first ran on) and never pickled.
    """

    #: Stripped from the model names this adapter is given (`anthropic:`, `openai:`).
    provider_prefix: ClassVar[str]

    def __init__(
        self,
        model: str | None = None,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        http_client: Any = None,
        max_retries: int = 0,
        timeout: float | None = None,
        default_headers: dict[str, str] | None = None,
        capabilities: ModelCapabilities | None = None,
    ) -> None:
        self._check_http_client(http_client)
        self.model = model.removeprefix(self.provider_prefix) if model else None
        self.api_key = api_key
        self.base_url = base_url
        self.http_client = http_client
        self.max_retries = max_retries
        self.timeout = timeout
        self.default_headers = default_headers
        self.capabilities = capabilities
        self._client: ClientT | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None

    def _check_http_client(self, http_client: Any) -> None:
        """Refuse, when built, an `http_client` the SDK cannot use."""

    def __getstate__(self) -> dict[str, Any]:
        """Never serialize the live client (it holds sockets and a loop)."""
        state = dict(self.__dict__)
        state.update(_client=None, _client_loop=None)
        return state

    def model_name(self, request: LLMRequest) -> str:
        """The adapter's own model wins; else the request's, without the prefix."""
        return self.model or request.model.removeprefix(self.provider_prefix)

    def _get_client(self) -> ClientT:
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            self._client = self._new_client()
            self._client_loop = loop
        return self._client

    def _new_client(self) -> ClientT:
        raise NotImplementedError


async def safe_forward(callback: TextDeltaCallback, delta: str) -> TextDeltaCallback | None:
    """Deliver a delta; a failing listener is dropped, never the LLM step."""
    try:
        await callback(delta)
    except Exception:
        logger.warning("on_text_delta failed; no more deltas for this step", exc_info=True)
        return None
    return callback


def wants_strict(spec: ToolSpec, request: LLMRequest) -> bool:
    """A tool asks for strict mode, or is the finish tool of a strict output."""
    return spec.strict or (request.strict_output and spec.name == FINISH_TOOL_NAME)


def convert_tools(
    request: LLMRequest,
    caps: ModelCapabilities,
    strict_tools: StrictSchemas,
    convert: Callable[..., ToolT],
    sent_schema: Callable[[ToolT], dict[str, Any]],
) -> list[ToolT]:
    """The request's tools through `convert(spec, strict=...)`; each strict one's schema
    as sent (`sent_schema`) is also put in `strict_tools`."""
    tools: list[ToolT] = []
    for spec in request.tools:
        strict = caps.strict_tools and wants_strict(spec, request)
        tool = convert(spec, strict=strict)
        if strict:
            strict_tools[spec.name] = sent_schema(tool)
        tools.append(tool)
    return tools


def strict_rejection(
    text: str, strict_tools: StrictSchemas, status: int, dialect: StrictDialect
) -> str:
    """`text` with why a 400/422 may come from the strict schemas sent, if any were."""
    if not strict_tools or status not in (400, 422):
        return text
    diagnosis = describe_strict_rejection(strict_tools, dialect)
    return text + (
        f"; {diagnosis}" if diagnosis else f"; strict mode was on for {sorted(strict_tools)}"
    )
