"""`MemoryManager`: long-term memory in `helix.memories`, scoped to a resource.

Every operation runs on helix's database loop (callable from any loop). Called from
workflow code, `save` and `search` are DBOS steps (`helix.memory.save`,
`helix.memory.search`), so a recovered workflow sees what it saw; inside a step (a
tool, a hook) they are part of that step.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from functools import partial
from typing import Any, TypeVar

from dbos import DBOS
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from helix_dbos.memory import store
from helix_dbos.memory.embedders import Embedder, HashingEmbedder, checked_vectors
from helix_dbos.memory.executors import (
    EmbeddingExecutor,
    InlineEmbeddingExecutor,
    in_workflow_code,
)
from helix_dbos.memory.keys import step_memory_ids
from helix_dbos.memory.memory_errors import (
    EmbeddingError,
    InvalidMemoryError,
    MemoryNotConfiguredError,
    VectorSearchUnavailableError,
)
from helix_dbos.memory.types import EmbedOutcome, Memory, MemoryHit, SearchMode, VectorSupport
from helix_dbos.runtime.process.event_loop import on_target_loop
from helix_dbos.runtime.process.process_runtime import current_runtime
from helix_dbos.store.storable import check_storable

T = TypeVar("T")
logger = logging.getLogger("helix_dbos.memory")

EMBED_BATCH = 64
# The longest memory text, in characters: a memory is a fact or a note (about 8,000
# tokens, what common embedding models take at most), and PostgreSQL's full-text index
# of a text caps out at 1 MB. Longer text is refused, not cut: split it into memories.
MAX_MEMORY_CHARS = 32_000
MAX_LIMIT = 1000
# One key for the vector set-up of every process (first 8 bytes of a fixed hash).
_ENSURE_LOCK = 0x6D656D5F76656331  # "mem_vec1"
_MODES = ("hybrid", "vector", "text")


class MemoryManager:
    """Save, search and forget memories; embeddings by `embedder` (default: the
    deterministic `HashingEmbedder`), computed when `executor` says (default:
    `InlineEmbeddingExecutor`)."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        embedder: Embedder | None = None,
        executor: EmbeddingExecutor | None = None,
    ) -> None:
        self.engine = engine
        self.embedder: Embedder = embedder or HashingEmbedder()
        self.executor: EmbeddingExecutor = executor or InlineEmbeddingExecutor()
        self._support: VectorSupport | None = None

    # --- set-up -------------------------------------------------------------------

    async def ensure(self) -> VectorSupport:
        """Create the pgvector extension, the embedding column and this dimension's HNSW
        index where the server allows (once per process, under an advisory lock), and
        say whether vector search is available."""
        if self._support is None:
            self._support = await on_target_loop(self._ensure)
        return self._support

    async def _ensure(self) -> VectorSupport:
        async with self.engine.begin() as conn:
            await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _ENSURE_LOCK})
            await store.enable_vector(conn)
            support = await store.vector_support(conn)
            if support.available and support.schema is not None:
                await store.ensure_vector_index(conn, support.schema, self.embedder.dimension)
        return support

    async def vector_support(self) -> VectorSupport:
        return await self.ensure()

    # --- writing ------------------------------------------------------------------

    async def save(
        self,
        text: str,
        *,
        resource_id: str | None = None,
        session_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        ttl_seconds: float | None = None,
        expires_at: datetime | None = None,
    ) -> Memory:
        """Save a memory: full-text searchable once this returns, vector-searchable once
        embedded. Without `resource_id` it belongs to `session_id`'s resource. Empty
        text, or text longer than `MAX_MEMORY_CHARS`, raises `InvalidMemoryError`."""
        check_storable(
            text=text, resource_id=resource_id, session_id=session_id, metadata=metadata or {}
        )
        if resource_id is None and session_id is None:
            raise ValueError("save() needs a resource_id or a session_id")
        if ttl_seconds is not None and ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive")
        memory = await self._durably(
            "helix.memory.save",
            self._insert,
            text,
            resource_id,
            session_id,
            dict(metadata or {}),
            ttl_seconds,
            expires_at,
        )
        outcome = await self.executor.submit(self._embed, [memory.memory_id])
        if outcome is not None and outcome.embedded:
            return replace(
                memory,
                embedding_status="complete",
                embedding_model=self.embedder.model,
                embedding_dimension=self.embedder.dimension,
            )
        if outcome is not None and outcome.failed:
            return replace(memory, embedding_status="failed")
        return memory

    async def _insert(
        self,
        body: str,
        resource_id: str | None,
        session_id: str | None,
        metadata: dict[str, Any],
        ttl_seconds: float | None,
        expires_at: datetime | None,
    ) -> Memory:
        # Checked in the step, not before it: a run in flight that saved such a text
        # before this check existed replays its recorded step instead of diverging.
        check_memory_text(body)
        if ttl_seconds is not None:
            expires_at = datetime.now(timezone.utc) + timedelta(seconds=ttl_seconds)
        async with self.engine.begin() as conn:
            if resource_id is None:
                assert session_id is not None
                resource_id = await store.session_resource(conn, session_id)
            return await store.insert(
                conn,
                memory_id=step_memory_ids.next_id(),
                resource_id=resource_id,
                session_id=session_id,
                body=body,
                metadata=metadata,
                expires_at=expires_at,
            )

    async def _embed(self, memory_ids: list[str]) -> EmbedOutcome:
        """Embed these memories and store the vectors. An unreachable embedder leaves
        them `pending` (with the error); a permanent error marks them `failed`."""
        support = await self.ensure()
        if not support.available or support.schema is None:
            return EmbedOutcome(pending=len(memory_ids))
        outcome = EmbedOutcome()
        for start in range(0, len(memory_ids), EMBED_BATCH):
            batch = memory_ids[start : start + EMBED_BATCH]
            outcome += await on_target_loop(partial(self._embed_batch, support, batch))
        return outcome

    async def _embed_batch(self, support: VectorSupport, memory_ids: list[str]) -> EmbedOutcome:
        assert support.schema is not None
        async with self.engine.connect() as conn:
            found, done = await store.texts_to_embed(conn, memory_ids, model=self.embedder.model)
        ids = [i for i in memory_ids if i in found]
        texts = [found[i] for i in ids]
        if not ids:
            return EmbedOutcome(embedded=done)
        try:
            vectors = checked_vectors(self.embedder, texts, await self.embedder.embed(texts))
        except Exception as exc:
            retryable = not isinstance(exc, EmbeddingError) or exc.retryable
            logger.warning(
                "embedding %d memories with %s failed (%s): %s",
                len(ids),
                self.embedder.model,
                "they stay pending" if retryable else "marked failed",
                exc,
            )
            async with self.engine.begin() as conn:
                await store.mark_unembedded(conn, ids, failed=not retryable, error=str(exc))
            if retryable:
                return EmbedOutcome(embedded=done, pending=len(ids))
            return EmbedOutcome(embedded=done, failed=len(ids))
        async with self.engine.begin() as conn:
            stored = await store.store_embeddings(
                conn,
                support.schema,
                self.embedder.model,
                self.embedder.dimension,
                dict(zip(ids, vectors, strict=True)),
            )
        return EmbedOutcome(embedded=stored + done)

    async def process_unembedded(self, *, limit: int | None = None) -> EmbedOutcome:
        """Embed every live memory left `pending` or `failed` (after an embedder outage
        or a crash) or embedded by another model; returns what happened to them."""
        support = await self.ensure()
        if not support.available:
            raise VectorSearchUnavailableError("memories cannot be embedded here")

        async def pending() -> list[str]:
            async with self.engine.connect() as conn:
                return await store.unembedded(conn, model=self.embedder.model, limit=limit)

        return await self._embed(await on_target_loop(pending))

    async def delete(self, memory_id: str) -> bool:
        return await self._run(lambda conn: store.delete(conn, memory_id))

    async def forget(self, resource_id: str) -> int:
        """Delete every memory of a resource (a user's right to be forgotten)."""
        return await self._run(lambda conn: store.forget(conn, resource_id))

    async def prune_expired(self) -> int:
        """Delete expired memories (searches skip them already)."""
        return await self._run(store.prune_expired)

    async def bind_session(self, session_id: str, resource_id: str) -> None:
        """Make `resource_id` the owner of the session's memories (`__remember__`,
        `__recall__`, prompt recall); `execute(..., resource_id=...)` does this."""
        check_storable(session_id=session_id, resource_id=resource_id)
        await self._run(lambda conn: store.bind_session(conn, session_id, resource_id))

    async def resource_of(self, session_id: str) -> str:
        async def read() -> str:
            async with self.engine.connect() as conn:
                return await store.session_resource(conn, session_id)

        return await on_target_loop(read)

    # --- reading ------------------------------------------------------------------

    async def get(self, memory_id: str) -> Memory | None:
        """A memory by id (None if it does not exist or expired)."""

        async def read() -> Memory | None:
            async with self.engine.connect() as conn:
                return await store.get(conn, memory_id)

        return await on_target_loop(read)

    async def search(
        self,
        query: str,
        *,
        resource_id: str,
        limit: int = 5,
        mode: SearchMode = "hybrid",
    ) -> list[MemoryHit]:
        """The resource's live memories best matching `query`, best first. `text`:
        full text; `vector`: cosine similarity of embeddings (pgvector needed);
        `hybrid`: both, fused by reciprocal rank (text alone without pgvector, or when
        the embedder is unreachable). A query longer than `MAX_MEMORY_CHARS` searches by
        its first `MAX_MEMORY_CHARS` characters (prompt recall's query is a user's whole
        message, whose full-text form could exceed PostgreSQL's limit)."""
        check_storable(query=query, resource_id=resource_id)
        query = query[:MAX_MEMORY_CHARS]
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {', '.join(_MODES)}, not {mode!r}")
        if not 1 <= limit <= MAX_LIMIT:
            raise ValueError(f"limit must be between 1 and {MAX_LIMIT}")
        return await self._durably(
            "helix.memory.search", self._search, query, resource_id, limit, mode
        )

    async def _search(
        self, query: str, resource_id: str, limit: int, mode: SearchMode
    ) -> list[MemoryHit]:
        support = await self.ensure()
        if mode == "vector" and not support.available:
            raise VectorSearchUnavailableError(
                "the extension is available on the server but not created in this database"
                if support.installable
                else "the server has no pgvector package"
            )
        vector: list[float] | None = None
        if mode != "text" and support.available:
            try:
                embedded = await self.embedder.embed([query])
                vector = checked_vectors(self.embedder, [query], embedded)[0]
            except Exception as exc:
                if mode == "vector":
                    raise
                logger.warning("hybrid memory search falls back to full text: %s", exc)
        effective: SearchMode = mode if vector is not None or mode == "text" else "text"
        async with self.engine.begin() as conn:  # a transaction: SET LOCAL in the search
            return await store.search(
                conn,
                mode=effective,
                query=query,
                resource_id=resource_id,
                limit=limit,
                schema=support.schema,
                dimension=self.embedder.dimension,
                model=self.embedder.model,
                vector=vector,
            )

    async def shutdown(self) -> None:
        """Drain the embedding executor (a background one's batches under way)."""
        await self.executor.shutdown()

    # --- plumbing -----------------------------------------------------------------

    async def _run(self, statement: Callable[[Any], Awaitable[T]]) -> T:
        async def tx() -> T:
            async with self.engine.begin() as conn:
                return await statement(conn)

        return await on_target_loop(tx)

    async def _durably(
        self, name: str, func: Callable[..., Coroutine[Any, Any, T]], *args: Any
    ) -> T:
        """`func(*args)` as a DBOS step in workflow code, else on helix's loop."""
        if in_workflow_code():
            return await DBOS.run_step_async({"name": name}, func, *args)
        return await on_target_loop(lambda: func(*args))


def check_memory_text(text: str) -> None:
    """Refuse what no one would recall: nothing, or more than one memory's worth."""
    if not text.strip():
        raise InvalidMemoryError("text is empty: a memory needs something to remember")
    if len(text) > MAX_MEMORY_CHARS:
        raise InvalidMemoryError(
            f"text is {len(text):,} characters long, more than a memory's "
            f"{MAX_MEMORY_CHARS:,}: split it into several memories"
        )


_installed: MemoryManager | None = None


def install_memory(manager: MemoryManager) -> MemoryManager:
    """Make `manager` the one agents' memory tools and prompt recall use."""
    global _installed
    _installed = manager
    return manager


def current_memory() -> MemoryManager:
    """The installed manager for this process's HelixDBOS; a default one (hashing
    embedder, inline executor) at first use."""
    global _installed
    try:
        engine = current_runtime().engine
    except RuntimeError as exc:
        raise MemoryNotConfiguredError(
            "Memory needs a HelixDBOS in this process (helix.memory or helix.use_memory)"
        ) from exc
    if _installed is None or _installed.engine is not engine:
        _installed = MemoryManager(engine)
    return _installed


def memory_texts(hits: Sequence[MemoryHit]) -> list[dict[str, str]]:
    return [{"memory_id": h.memory.memory_id, "text": h.memory.text} for h in hits]
