"""`OpenAIEmbedder`: OpenAI's `/embeddings` through the official SDK, or any server that
speaks it (`base_url`). Its errors become `EmbeddingError`s that say whether a retry
may help."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import openai

from helix_dbos.memory.memory_errors import EmbeddingError

# OpenAI's limit is 2048 inputs per request; smaller batches keep a failure cheap.
OPENAI_BATCH = 256
_OPENAI_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}


class OpenAIEmbedder:
    """OpenAI's `/embeddings` through the official SDK. `dimension` defaults to the
    model's; text-embedding-3 models are asked for exactly that many dimensions (they
    shorten their vectors on request). `base_url` reaches any compatible server."""

    def __init__(
        self,
        model: str = "text-embedding-3-small",
        *,
        dimension: int | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        client: Any = None,
        send_dimensions: bool | None = None,
    ) -> None:
        known = _OPENAI_DIMENSIONS.get(model)
        if dimension is None and known is None:
            raise ValueError(f"OpenAIEmbedder: give the dimension of model '{model}'")
        self._model = model
        self._dimension = int(dimension or known or 0)
        self._send_dimensions = (
            model.startswith("text-embedding-3") if send_dimensions is None else send_dimensions
        )
        self._client = client
        self._api_key = api_key
        self._base_url = base_url

    @property
    def model(self) -> str:
        return self._model

    @property
    def dimension(self) -> int:
        return self._dimension

    def _sdk(self) -> Any:
        if self._client is None:
            self._client = openai.AsyncOpenAI(api_key=self._api_key, base_url=self._base_url)
        return self._client

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), OPENAI_BATCH):
            vectors += await self._batch(list(texts[start : start + OPENAI_BATCH]))
        return vectors

    async def _batch(self, texts: list[str]) -> list[list[float]]:
        extra: dict[str, Any] = {"dimensions": self._dimension} if self._send_dimensions else {}
        try:
            response = await self._sdk().embeddings.create(
                model=self._model,
                # The API refuses an empty string; a space embeds as "nothing".
                input=[text or " " for text in texts],
                encoding_format="float",
                **extra,
            )
        except openai.APIStatusError as exc:
            retryable = exc.status_code in (408, 409, 429) or exc.status_code >= 500
            raise EmbeddingError(
                f"OpenAI embeddings ({self._model}) failed with HTTP {exc.status_code}: "
                f"{exc.message}",
                retryable=retryable,
            ) from exc
        except openai.APIError as exc:  # connection errors, timeouts
            raise EmbeddingError(
                f"OpenAI embeddings ({self._model}) unreachable: {exc}", retryable=True
            ) from exc
        ordered = sorted(response.data, key=lambda item: item.index)
        return [list(item.embedding) for item in ordered]
