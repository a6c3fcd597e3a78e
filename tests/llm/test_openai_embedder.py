"""OpenAIEmbedder on the embeddings API's wire format, through the official SDK with an
httpx MockTransport replaying the documented JSON (no network)."""

from __future__ import annotations

import httpx
import openai
import pytest
from wire import Recorder

from helix_dbos.memory import EmbeddingDimensionError, EmbeddingError
from helix_dbos.memory.embedders import checked_vectors
from helix_dbos.memory.openai_embedder import OpenAIEmbedder


def embeddings(*vectors: list[float], order: list[int] | None = None) -> dict:
    """A `list` of `embedding` objects, as https://platform.openai.com/docs/api-reference/embeddings returns."""
    indexes = order or list(range(len(vectors)))
    return {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": vectors[i]} for i in indexes],
        "model": "text-embedding-3-small",
        "usage": {"prompt_tokens": 8, "total_tokens": 8},
    }


def embedder(recorder: Recorder, **kwargs) -> OpenAIEmbedder:
    client = openai.AsyncOpenAI(api_key="sk-test", http_client=recorder.client(), max_retries=0)
    return OpenAIEmbedder(client=client, **kwargs)


async def test_the_request_and_the_vectors_in_input_order():
    recorder = Recorder(httpx, (200, embeddings([0.1, 0.2, 0.3], [0.4, 0.5, 0.6], order=[1, 0])))
    e = embedder(recorder, dimension=3)
    vectors = await e.embed(["first", ""])
    assert vectors == [[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]]  # by `index`, not by arrival
    assert str(recorder.requests[0].url) == "https://api.openai.com/v1/embeddings"
    assert recorder.body == {
        "model": "text-embedding-3-small",
        "input": ["first", " "],  # the API refuses an empty string
        "encoding_format": "float",
        "dimensions": 3,
    }
    assert e.model == "text-embedding-3-small" and e.dimension == 3


async def test_older_models_are_not_sent_dimensions_and_a_wrong_length_is_refused():
    recorder = Recorder(httpx, (200, embeddings([0.1, 0.2])))
    e = embedder(recorder, model="text-embedding-ada-002")
    assert e.dimension == 1536
    vectors = await e.embed(["x"])
    assert "dimensions" not in recorder.body
    with pytest.raises(
        EmbeddingDimensionError, match="dimension 2, but the memory store uses dimension 1536"
    ):
        checked_vectors(e, ["x"], vectors)


@pytest.mark.parametrize(
    ("status", "retryable"), [(429, True), (500, True), (400, False), (401, False)]
)
async def test_errors_say_whether_a_retry_can_help(status, retryable):
    body = {"error": {"message": "boom", "type": "invalid_request_error", "code": None}}
    e = embedder(Recorder(httpx, (status, body)))
    with pytest.raises(EmbeddingError, match=f"HTTP {status}: .*boom") as caught:
        await e.embed(["x"])
    assert caught.value.retryable is retryable


async def test_an_unreachable_server_is_retryable():
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    client = openai.AsyncOpenAI(
        api_key="sk-test",
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(refuse)),
        max_retries=0,
    )
    with pytest.raises(EmbeddingError, match="unreachable") as caught:
        await OpenAIEmbedder(client=client).embed(["x"])
    assert caught.value.retryable


def test_an_unknown_model_needs_its_dimension():
    with pytest.raises(ValueError, match="give the dimension"):
        OpenAIEmbedder("my-local-model")
    assert (
        OpenAIEmbedder("my-local-model", dimension=768, base_url="http://localhost:9/v1").dimension
        == 768
    )
