"""Long-term memory (issue 36) on the embedded PostgreSQL, which has pgvector: saved at
once, full-text searchable at once, vector-searchable once embedded; embedder outages,
bad input, expiry, and agents remembering across sessions."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

import pytest
from helpers import require_pgvector, sql

from helix_dbos import Tool, ToolContext
from helix_dbos.errors import InvalidInputError
from helix_dbos.memory import (
    MAX_MEMORY_CHARS,
    BackgroundEmbeddingExecutor,
    EmbeddingDimensionError,
    EmbeddingError,
    HashingEmbedder,
    InlineEmbeddingExecutor,
    InvalidMemoryError,
    MemoryManager,
    recall_hooks,
    store,
)
from helix_dbos.memory.embedders import checked_vectors
from helix_dbos.memory.keys import step_memory_id
from helix_dbos.memory.manager import current_memory


@pytest.fixture(autouse=True)
def _pgvector(database_url: str) -> None:
    require_pgvector(database_url)


def resource() -> str:
    return f"user-{uuid.uuid4().hex[:8]}"


class GatedEmbedder(HashingEmbedder):
    """The hashing embedder; memories' texts are held until the test opens the gate (a
    query's are not). Records the memory texts it embedded."""

    def __init__(self, held: set[str]) -> None:
        super().__init__(64)
        self.held = held
        self.gate = threading.Event()  # set from the test's loop, waited on helix's
        self.embedded: list[str] = []

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self.held.intersection(texts):
            while not self.gate.is_set():
                await asyncio.sleep(0.01)
            self.embedded += texts
        return await super().embed(texts)


class FlakyEmbedder(HashingEmbedder):
    """Unreachable while `down`, like a provider outage."""

    def __init__(self, dimension: int = 64) -> None:
        super().__init__(dimension)
        self.down = True
        self.calls = 0

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        if self.down:
            raise EmbeddingError("embedding service unreachable", retryable=True)
        return await super().embed(texts)


class ShortEmbedder(HashingEmbedder):
    """Claims one dimension, returns vectors of another."""

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [v[:8] for v in await super().embed(texts)]


def manager(helix, embedder=None, executor=None) -> MemoryManager:
    return MemoryManager(
        helix.runtime.engine, embedder=embedder or HashingEmbedder(64), executor=executor
    )


async def test_saved_memory_is_text_searchable_at_once_and_vector_searchable_once_embedded(
    helix, database_url
):
    texts = ["Alice prefers oolong tea in the morning", "The deploy key rotates every Friday"]
    embedder = GatedEmbedder(set(texts))
    executor = BackgroundEmbeddingExecutor(max_concurrency=2)
    memory = manager(helix, embedder, executor)
    assert (await memory.ensure()).available
    rid = resource()
    saved = await memory.save(texts[0], resource_id=rid)
    other = await memory.save(texts[1], resource_id=rid)
    assert saved.embedding_status == "pending"

    hits = await memory.search("oolong tea", resource_id=rid, mode="text")
    assert [h.memory.memory_id for h in hits] == [saved.memory_id]
    assert hits[0].text_rank == 1
    assert await memory.search("oolong tea", resource_id=rid, mode="vector") == []

    embedder.gate.set()
    await executor.shutdown()  # drains the batches under way
    assert executor.in_flight == 0
    assert sorted(embedder.embedded) == sorted([saved.text, other.text])
    rows = sql(
        database_url,
        "SELECT embedding_status, embedding_model, embedding_dimension FROM helix.memories "
        "WHERE resource_id = %s",
        rid,
    )
    assert rows == [("complete", embedder.model, 64)] * 2

    vector = await memory.search("tea for the morning", resource_id=rid, mode="vector")
    assert vector[0].memory.memory_id == saved.memory_id and vector[0].vector_rank == 1
    assert 0 < vector[0].score <= 1
    hybrid = await memory.search("oolong", resource_id=rid, mode="hybrid", limit=2)
    assert hybrid[0].memory.memory_id == saved.memory_id
    assert hybrid[0].text_rank == 1 and hybrid[0].vector_rank == 1
    with pytest.raises(RuntimeError, match="shut down"):
        await memory.save("after shutdown", resource_id=rid)


async def test_vector_search_uses_the_hnsw_index(helix, database_url):
    memory = manager(helix)
    await memory.ensure()
    indexes = sql(
        database_url,
        "SELECT indexdef FROM pg_indexes WHERE schemaname = 'helix' AND indexname = 'memories_embedding_64'",
    )
    assert len(indexes) == 1 and "hnsw" in indexes[0][0] and "vector_cosine_ops" in indexes[0][0]


async def test_embedder_down_leaves_memories_pending_and_text_search_works(helix, database_url):
    embedder = FlakyEmbedder()
    memory = manager(helix, embedder, InlineEmbeddingExecutor())
    rid = resource()
    saved = [
        await memory.save(text, resource_id=rid)
        for text in ("Bob is allergic to peanuts", "Bob lives in Lisbon", "Bob's cat is Miso")
    ]
    assert {m.embedding_status for m in saved} == {"pending"}
    rows = sql(
        database_url,
        "SELECT embedding_status, embedding_error FROM helix.memories WHERE resource_id = %s",
        rid,
    )
    assert rows == [("pending", "embedding service unreachable")] * 3

    assert [
        h.memory.text for h in await memory.search("peanuts", resource_id=rid, mode="text")
    ] == ["Bob is allergic to peanuts"]
    # hybrid falls back to full text while the embedder is down; vector says why it cannot
    hybrid = await memory.search("Lisbon", resource_id=rid)
    assert [h.memory.text for h in hybrid] == ["Bob lives in Lisbon"]
    with pytest.raises(EmbeddingError, match="unreachable"):
        await memory.search("Lisbon", resource_id=rid, mode="vector")

    embedder.down = False
    outcome = await memory.process_unembedded()
    assert outcome.embedded >= 3 and outcome.pending == 0
    assert sql(
        database_url,
        "SELECT DISTINCT embedding_status, embedding_error FROM helix.memories WHERE resource_id = %s",
        rid,
    ) == [("complete", None)]
    assert (await memory.process_unembedded()).embedded == 0, "nothing left to embed"
    hit = await memory.search("where does Bob live", resource_id=rid, mode="vector", limit=1)
    assert hit[0].memory.text == "Bob lives in Lisbon"


async def test_a_dimension_mismatch_is_a_clear_error_and_marks_the_memory_failed(
    helix, database_url
):
    with pytest.raises(
        EmbeddingDimensionError, match="dimension 8, but the memory store uses dimension 64"
    ):
        checked_vectors(ShortEmbedder(64), ["x"], await ShortEmbedder(64).embed(["x"]))
    memory = manager(helix, ShortEmbedder(64))
    rid = resource()
    saved = await memory.save("Carol speaks Basque", resource_id=rid)
    assert saved.embedding_status == "failed"
    stored = await memory.get(saved.memory_id)
    assert stored is not None and stored.embedding_status == "failed"
    assert "returned a vector of dimension 8" in (stored.embedding_error or "")
    with pytest.raises(EmbeddingDimensionError):
        await memory.search("Basque", resource_id=rid, mode="vector")
    # process_unembedded retries failed memories too, with a working embedder
    fixed = manager(helix, HashingEmbedder(64))
    assert (await fixed.process_unembedded()).failed == 0
    assert (await fixed.get(saved.memory_id)).embedding_status == "complete"


async def test_unstorable_input_is_refused_at_the_edge(helix):
    memory = manager(helix)
    with pytest.raises(InvalidInputError, match="text contains a NUL"):
        await memory.save("bad\x00text", resource_id=resource())
    with pytest.raises(InvalidInputError, match="resource_id contains a NUL"):
        await memory.save("fine", resource_id="u\ud800")
    with pytest.raises(InvalidInputError, match="query"):
        await memory.search("bad\x00", resource_id="r")
    with pytest.raises(ValueError, match="mode must be one of"):
        await memory.search("x", resource_id="r", mode="semantic")  # type: ignore[arg-type]


async def test_empty_and_oversized_text_is_refused_and_nothing_is_written(helix, database_url):
    memory = manager(helix)
    rid = resource()
    for bad in ["", "  \n\t "]:
        with pytest.raises(InvalidMemoryError, match="text is empty"):
            await memory.save(bad, resource_id=rid)
    # 2.4 MB failed with PostgreSQL's "string is too long for tsvector" before
    for size in [MAX_MEMORY_CHARS + 1, 2_400_000]:
        with pytest.raises(InvalidMemoryError, match=f"{size:,} characters long"):
            await memory.save("tea " * (size // 4) + "x" * (size % 4), resource_id=rid)
    assert sql(database_url, "SELECT count(*) FROM helix.memories WHERE resource_id = %s", rid) == [
        (0,)
    ]
    # the longest memory allowed, of all-distinct words, is stored and found by its last word
    words = " ".join(f"w{i:05d}" for i in range(MAX_MEMORY_CHARS // 7 - 1))
    longest = words + " " * (MAX_MEMORY_CHARS - len(words) - 4) + "tail"
    assert len(longest) == MAX_MEMORY_CHARS
    saved = await memory.save(longest, resource_id=rid)
    assert saved.embedding_status == "complete"
    [hit] = await memory.search("tail", resource_id=rid, mode="text")
    assert hit.memory.memory_id == saved.memory_id
    # a query of any size is searched by its first MAX_MEMORY_CHARS characters (2.4 MB
    # of distinct words: a full-text form over PostgreSQL's 1 MB, which failed before)
    huge = "tail " + " ".join(f"q{i:07d}" for i in range(300_000))
    assert [h.memory.memory_id for h in await memory.search(huge, resource_id=rid)] == [
        saved.memory_id
    ]


async def test_remember_with_bad_text_gives_the_model_an_error_and_writes_nothing(
    helix, make_agent, mock_llm, database_url
):
    """The model's empty, blank, oversized, NUL or lone-surrogate text: the run goes on,
    the tool's result says what was wrong (the model can fix it), nothing bad is stored."""
    agent = make_agent(system_prompt="You remember users.", tools=["__remember__"])
    texts = ["", "   ", "x" * 2_400_000, "tea\x00 and \ud800 cake"]

    def respond(request):
        results = [m for m in request.messages if m.role == "tool"]
        if len(results) < len(texts):
            fact = {"text": texts[len(results)]}
            call = {"id": f"r{len(results)}", "name": "__remember__", "arguments": fact}
            return {"type": "tool_calls", "tool_calls": [call]}
        return {"type": "text", "content": json.dumps([m.content for m in results])}

    rid = resource()
    mock_llm.set_responder(respond)
    try:
        done = await (await helix.execute(agent, "remember", resource_id=rid)).result()
    finally:
        mock_llm.set_responder(None)
    assert done.status == "completed", done.error
    empty, blank, huge, unstorable = json.loads(done.output)
    assert "at least 1 character" in empty
    assert "text is empty" in blank
    assert "2,400,000 characters long" in huge and "split it" in huge
    assert json.loads(unstorable)["remembered"] is True
    assert sql(database_url, "SELECT text FROM helix.memories WHERE resource_id = %s", rid) == [
        ("tea\ufffd and \ufffd cake",)
    ]


async def test_a_tool_step_saving_several_memories_keeps_each_one(
    helix, make_agent, mock_llm, database_url
):
    """Inside a step (a tool's), a memory's id is the step's plus the save's ordinal:
    two saves in one step are two memories, not one met twice."""

    async def save_two(ctx: ToolContext) -> list[str]:
        memory = current_memory()
        saved = [
            await memory.save(text, session_id=ctx.session_id)
            for text in ["Ivo plays the cello", "Ivo lives in Ghent"]
        ]
        return [m.memory_id for m in saved]

    agent = make_agent(system_prompt="You remember.", tools=[Tool("save_two", save_two)])

    def respond(request):
        results = [m for m in request.messages if m.role == "tool"]
        if not results:
            call = {"id": "s1", "name": "save_two", "arguments": {}}
            return {"type": "tool_calls", "tool_calls": [call]}
        return {"type": "text", "content": results[0].content}

    rid = resource()
    mock_llm.set_responder(respond)
    try:
        done = await (await helix.execute(agent, "save", resource_id=rid)).result()
    finally:
        mock_llm.set_responder(None)
    assert done.status == "completed", done.error
    ids = json.loads(done.output)
    assert len(set(ids)) == 2
    assert sql(
        database_url,
        "SELECT memory_id, text FROM helix.memories WHERE resource_id = %s ORDER BY text",
        rid,
    ) == [(ids[1], "Ivo lives in Ghent"), (ids[0], "Ivo plays the cello")]
    [(workflow, step)] = sql(
        database_url,
        "SELECT workflow_uuid, function_id FROM dbos.operation_outputs o JOIN helix.runs r "
        "ON r.workflow_id = o.workflow_uuid WHERE r.run_id = %s "
        "AND function_name = 'helix.tool:save_two'",
        done.run_id,
    )
    assert ids == [step_memory_id(workflow, step, 0), step_memory_id(workflow, step, 1)]


async def test_expired_memories_are_not_found_and_prune_deletes_them(helix, database_url):
    memory = manager(helix)
    rid = resource()
    gone = await memory.save(
        "Dave's temporary door code is 4711",
        resource_id=rid,
        expires_at=datetime.now(timezone.utc) - timedelta(seconds=1),
    )
    soon = await memory.save("Dave's parcel code is 4711", resource_id=rid, ttl_seconds=3600)
    assert soon.expires_at is not None
    for mode in ("text", "vector", "hybrid"):
        found = await memory.search("door code 4711", resource_id=rid, mode=mode)
        assert [h.memory.memory_id for h in found] == [soon.memory_id], mode
    assert await memory.get(gone.memory_id) is None
    assert await memory.prune_expired() >= 1
    assert (
        sql(database_url, "SELECT 1 FROM helix.memories WHERE memory_id = %s", gone.memory_id) == []
    )


async def test_get_delete_forget_and_resource_isolation(helix):
    memory = manager(helix)
    erin, frank = resource(), resource()
    kept = await memory.save("Erin plays the cello", resource_id=erin, metadata={"topic": "music"})
    await memory.save("Frank plays the cello too", resource_id=frank)
    found = await memory.search("cello", resource_id=erin)
    assert [h.memory.memory_id for h in found] == [kept.memory_id]
    assert found[0].memory.metadata == {"topic": "music"}
    assert (await memory.get(kept.memory_id)).text == "Erin plays the cello"
    assert await memory.delete(kept.memory_id) is True
    assert await memory.delete(kept.memory_id) is False
    assert await memory.search("cello", resource_id=erin) == []
    assert await memory.forget(frank) == 1
    assert await memory.search("cello", resource_id=frank, mode="text") == []


def remember_then_answer(text: str):
    def respond(request):
        if not any(m.role == "tool" for m in request.messages):
            return {
                "type": "tool_calls",
                "tool_calls": [{"id": "r1", "name": "__remember__", "arguments": {"text": text}}],
            }
        return {"type": "text", "content": "noted"}

    return respond


async def test_an_agent_recalls_across_sessions_of_one_resource(
    helix, make_agent, mock_llm, database_url
):
    agent = make_agent(system_prompt="You remember users.", tools=["__remember__", "__recall__"])
    rid = resource()

    def respond(request):
        user = next(m.content for m in request.messages if m.role == "user")
        tool_results = [m for m in request.messages if m.role == "tool"]
        if tool_results:
            return {"type": "text", "content": tool_results[-1].content}
        if user.startswith("remember"):
            fact = "My favourite drink is oolong tea\x00 with honey"  # a NUL from the model
            return {
                "type": "tool_calls",
                "tool_calls": [{"id": "r1", "name": "__remember__", "arguments": {"text": fact}}],
            }
        return {
            "type": "tool_calls",
            "tool_calls": [
                {"id": "q1", "name": "__recall__", "arguments": {"query": "favourite drink"}}
            ],
        }

    mock_llm.set_responder(respond)
    try:
        first = await (await helix.execute(agent, "remember this", resource_id=rid)).result()
        assert first.status == "completed", first.error
        saved = json.loads(first.output)
        assert saved["remembered"] is True and saved["embedding_status"] == "complete"
        second = await (await helix.execute(agent, "what do I drink?", resource_id=rid)).result()
        stranger = await (
            await helix.execute(agent, "what do I drink?", resource_id=resource())
        ).result()
    finally:
        mock_llm.set_responder(None)
    assert second.session_id != first.session_id
    recalled = json.loads(second.output)["memories"]
    assert [m["text"] for m in recalled] == ["My favourite drink is oolong tea\ufffd with honey"]
    assert recalled[0]["memory_id"] == saved["memory_id"]
    assert json.loads(stranger.output)["memories"] == []
    # saving and embedding are two steps of the run's workflow, each done once
    steps = sql(
        database_url,
        "SELECT function_name FROM dbos.operation_outputs o JOIN helix.runs r "
        "ON r.workflow_id = o.workflow_uuid WHERE r.session_id = %s "
        "AND function_name LIKE 'helix.memory.%%' ORDER BY function_id",
        first.session_id,
    )
    assert steps == [("helix.memory.save",), ("helix.memory.embed",)]
    assert sql(
        database_url,
        "SELECT resource_id, session_id FROM helix.memories WHERE memory_id = %s",
        saved["memory_id"],
    ) == [(rid, first.session_id)]


async def test_recall_injects_top_memories_into_the_system_prompt_and_records_them(
    helix, make_agent, mock_llm, database_url
):
    agent = make_agent(system_prompt="You are helpful.", hooks=recall_hooks(top_k=2))
    rid = resource()
    memory = helix.memory
    tea = await memory.save("Gina drinks green tea every afternoon", resource_id=rid)
    await memory.save("Gina's sister is called Hana", resource_id=rid)
    await memory.save("Gina works on tea plantations research", resource_id=rid)
    await memory.save("Unrelated: green tea for somebody else", resource_id=resource())
    mock_llm.add_response({"type": "text", "content": "ok"}, agent=agent.name)
    result = await (
        await helix.execute(agent, "Which tea does Gina drink?", resource_id=rid)
    ).result()
    assert result.status == "completed", result.error
    system = mock_llm.get_last_input().system or ""
    assert system.startswith("You are helpful.\n\n## Relevant memories\n- ")
    injected = [line[2:] for line in system.splitlines() if line.startswith("- ")]
    assert len(injected) == 2 and "Gina drinks green tea every afternoon" in injected
    assert "somebody else" not in system
    recorded = sql(
        database_url,
        "SELECT step, memories FROM helix.memory_recalls WHERE run_id = %s",
        result.run_id,
    )
    assert recorded[0][0] == 1
    assert [m["text"] for m in recorded[0][1]] == injected
    assert tea.memory_id in [m["memory_id"] for m in recorded[0][1]]


async def test_vector_search_through_the_hnsw_index_and_exactly_agree(helix, monkeypatch):
    """A resource below `EXACT_BELOW` memories is searched exactly; above, through HNSW.
    On a small table both give the same nearest memories."""
    memory = manager(helix)
    rid = resource()
    for text in ("Jon repairs bicycles", "Jon bakes sourdough", "Jon sails on weekends"):
        await memory.save(text, resource_id=rid)
    exact = await memory.search("bicycle repair", resource_id=rid, mode="vector", limit=3)
    monkeypatch.setattr(store, "EXACT_BELOW", 1)  # every resource is "large" now
    indexed = await memory.search("bicycle repair", resource_id=rid, mode="vector", limit=3)
    assert exact[0].memory.text == "Jon repairs bicycles"
    assert [h.memory.memory_id for h in indexed] == [h.memory.memory_id for h in exact]
    assert [round(h.score, 6) for h in indexed] == [round(h.score, 6) for h in exact]
    sql_text = store.search_sql("vector", 3, "public", 64, exact=False)
    assert "+ 0" not in sql_text and "+ 0" in store.search_sql(
        "vector", 3, "public", 64, exact=True
    )


async def test_helix_prune_deletes_expired_memories(helix, database_url):
    memory = manager(helix)
    rid = resource()
    expired = await memory.save(
        "Kim's one-time code is 9921",
        resource_id=rid,
        expires_at=datetime.now(timezone.utc) - timedelta(minutes=1),
    )
    kept = await memory.save("Kim's birthday is in May", resource_id=rid, ttl_seconds=3600)
    report = await helix.checkpoints.prune(older_than=timedelta(days=3650), batch_size=1)
    assert report.memories >= 1
    remaining = sql(
        database_url, "SELECT memory_id FROM helix.memories WHERE resource_id = %s", rid
    )
    assert remaining == [(kept.memory_id,)]
    assert expired.memory_id not in [r[0] for r in remaining]
