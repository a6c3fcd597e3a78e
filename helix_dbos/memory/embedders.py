"""Embedders turn texts into vectors. Any object with `model`, `dimension` and an async
`embed(texts)` is one (`Embedder`); two ship here:

- `OpenAIEmbedder` (`helix_dbos.memory.openai_embedder`): OpenAI's embeddings API, or
  any server speaking it. Semantic quality; costs a network call per batch.
- `HashingEmbedder`: feature hashing of words and character trigrams, in process,
  deterministic, no network and no model download. It finds shared words and word
  forms, not meaning: for development, tests and offline demos.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from helix_dbos.memory.memory_errors import EmbeddingDimensionError, EmbeddingError

_WORD = re.compile(r"\w+", re.UNICODE)


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of `dimension` floats, one per text, in order."""

    @property
    def model(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


def checked_vectors(embedder: Embedder, texts: Sequence[str], vectors: Any) -> list[list[float]]:
    """The embedder's answer, refused unless it is one finite vector of the store's
    dimension per text."""
    if not isinstance(vectors, list) or len(vectors) != len(texts):
        got = len(vectors) if isinstance(vectors, list) else type(vectors).__name__
        raise EmbeddingError(
            f"Embedder '{embedder.model}' returned {got} vectors for {len(texts)} texts",
            retryable=False,
        )
    out: list[list[float]] = []
    for vector in vectors:
        if len(vector) != embedder.dimension:
            raise EmbeddingDimensionError(embedder.model, embedder.dimension, len(vector))
        floats = [float(x) for x in vector]
        if not all(math.isfinite(x) for x in floats):
            raise EmbeddingError(
                f"Embedder '{embedder.model}' returned a vector with NaN or infinity",
                retryable=False,
            )
        out.append(floats)
    return out


class HashingEmbedder:
    """Deterministic bag-of-features vectors: each lower-cased word (weight 1) and each
    of its character trigrams (weight 0.5) adds a signed count at a hashed index; the
    vector is normalised. Same text, same vector, in every process and version."""

    def __init__(self, dimension: int = 256) -> None:
        if dimension < 8:
            raise ValueError("HashingEmbedder needs a dimension of at least 8")
        self._dimension = dimension

    @property
    def model(self) -> str:
        return f"helix-hashing-v1-{self._dimension}"

    @property
    def dimension(self) -> int:
        return self._dimension

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.embed_one(text) for text in texts]

    def embed_one(self, text: str) -> list[float]:
        vector = [0.0] * self._dimension
        for word in _WORD.findall(text.lower()):
            self._add(vector, "w:" + word, 1.0)
            padded = f"<{word}>"
            for i in range(len(padded) - 2):
                self._add(vector, "t:" + padded[i : i + 3], 0.5)
        norm = math.sqrt(sum(x * x for x in vector))
        if norm == 0:  # no words: a fixed unit vector (cosine distance needs a length)
            vector[0] = 1.0
            return vector
        return [x / norm for x in vector]

    def _add(self, vector: list[float], feature: str, weight: float) -> None:
        digest = hashlib.blake2b(feature.encode("utf-8", "surrogatepass"), digest_size=8).digest()
        h = int.from_bytes(digest, "big")
        vector[h % self._dimension] += weight if (h >> 63) & 1 else -weight
