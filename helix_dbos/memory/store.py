"""The SQL of the memory store (`helix.memories`), one function per statement.

Vector statements name the `vector` type and its `<=>` operator by the schema the
extension lives in, so they work whatever the search path. Embeddings of every model
share one untyped `embedding` column; each dimension gets its own partial HNSW index on
`embedding::vector(N)`, which the search's ORDER BY matches.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from helix_dbos.memory.types import Memory, MemoryHit, SearchMode, VectorSupport
from helix_dbos.store.storable import dumps

# Reciprocal rank fusion's constant (Cormack et al.): a hit's score is the sum over the
# lists that found it of 1 / (RRF_K + rank).
RRF_K = 60
# How many candidates each list contributes to a hybrid query, per result asked for.
CANDIDATES_PER_RESULT = 4
MIN_CANDIDATES = 40
# Below this many memories a resource's vector search compares all of them (exact, a few
# milliseconds); above, the HNSW index answers. pgvector (before 0.8) filters the
# index's candidates by resource after the scan, so a resource that is a small part of
# a large table would get too few hits from it.
EXACT_BELOW = 10_000
HNSW_EF_SEARCH = 100

_COLUMNS = (
    "m.memory_id, m.resource_id, m.session_id, m.text, m.metadata, m.embedding_status, "
    "m.embedding_model, m.embedding_dimension, m.embedding_error, m.created_at, m.expires_at"
)
_LIVE = "(m.expires_at IS NULL OR m.expires_at > now())"
# The query's words as an OR of their lexemes (a memory needs one shared word, and more
# shared words rank higher); stop words only: an empty query that matches nothing.
_TSQUERY = (
    "CAST(array_to_string(ARRAY(SELECT quote_literal(lexeme) FROM "
    "unnest(to_tsvector('english', :query))), ' | ') AS tsquery)"
)
_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*$")


def _memory(row: Any) -> Memory:
    return Memory(
        memory_id=row.memory_id,
        resource_id=row.resource_id,
        session_id=row.session_id,
        text=row.text,
        metadata=dict(row.metadata or {}),
        embedding_status=row.embedding_status,
        embedding_model=row.embedding_model,
        embedding_dimension=row.embedding_dimension,
        embedding_error=row.embedding_error,
        created_at=row.created_at,
        expires_at=row.expires_at,
    )


def vector_literal(vector: list[float]) -> str:
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def _quoted(schema: str) -> str:
    if not _SCHEMA_NAME.match(schema):
        return '"' + schema.replace('"', '""') + '"'
    return schema


async def vector_support(conn: AsyncConnection) -> VectorSupport:
    row = (
        await conn.execute(
            text(
                "SELECT (SELECT n.nspname FROM pg_extension e JOIN pg_namespace n "
                "ON n.oid = e.extnamespace WHERE e.extname = 'vector') AS schema, "
                "(SELECT extversion FROM pg_extension WHERE extname = 'vector') AS version, "
                "EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector') AS installable, "
                "EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = 'helix' "
                "AND table_name = 'memories' AND column_name = 'embedding') AS has_column"
            )
        )
    ).one()
    available = row.schema is not None and bool(row.has_column)
    return VectorSupport(available, row.schema, row.version, bool(row.installable))


async def enable_vector(conn: AsyncConnection) -> None:
    """Create the extension and the embedding column where the server can (the
    migration's function: it never fails for a missing or forbidden extension)."""
    await conn.execute(text("SELECT helix.memory_enable_vector()"))


async def ensure_vector_index(conn: AsyncConnection, schema: str, dimension: int) -> None:
    """The HNSW (cosine) index of one dimension's embeddings."""
    dim = int(dimension)
    await conn.execute(
        text(
            f"CREATE INDEX IF NOT EXISTS memories_embedding_{dim} ON helix.memories "
            f"USING hnsw ((CAST(embedding AS {_quoted(schema)}.vector({dim}))) "
            f"{_quoted(schema)}.vector_cosine_ops) WHERE embedding_dimension = {dim}"
        )
    )


async def insert(
    conn: AsyncConnection,
    *,
    memory_id: str,
    resource_id: str,
    session_id: str | None,
    body: str,
    metadata: dict[str, Any],
    expires_at: datetime | None,
) -> Memory:
    """Insert a memory and return it. The id is the saving step's (`keys`): a step run
    again after a crash finds its first life's row and keeps it, as readers saw it."""
    await conn.execute(
        text(
            "INSERT INTO helix.memories (memory_id, resource_id, session_id, text, metadata, "
            "expires_at) VALUES (:id, :rid, :sid, :body, CAST(:meta AS jsonb), :exp) "
            "ON CONFLICT (memory_id) DO NOTHING"
        ),
        {
            "id": memory_id,
            "rid": resource_id,
            "sid": session_id,
            "body": body,
            "meta": dumps(metadata),
            "exp": expires_at,
        },
    )
    found = await get(conn, memory_id, include_expired=True)
    assert found is not None
    return found


async def get(
    conn: AsyncConnection, memory_id: str, *, include_expired: bool = False
) -> Memory | None:
    live = "" if include_expired else f" AND {_LIVE}"
    row = (
        await conn.execute(
            text(f"SELECT {_COLUMNS} FROM helix.memories m WHERE m.memory_id = :id{live}"),
            {"id": memory_id},
        )
    ).first()
    return _memory(row) if row is not None else None


async def delete(conn: AsyncConnection, memory_id: str) -> bool:
    result = await conn.execute(
        text("DELETE FROM helix.memories WHERE memory_id = :id"), {"id": memory_id}
    )
    return bool(result.rowcount)


async def forget(conn: AsyncConnection, resource_id: str) -> int:
    result = await conn.execute(
        text("DELETE FROM helix.memories WHERE resource_id = :rid"), {"rid": resource_id}
    )
    return int(result.rowcount)


async def prune_expired(conn: AsyncConnection) -> int:
    result = await conn.execute(
        text("DELETE FROM helix.memories WHERE expires_at IS NOT NULL AND expires_at <= now()")
    )
    return int(result.rowcount)


_PRUNE_EXPIRED_BATCH = text(
    "WITH victim AS (SELECT memory_id FROM helix.memories WHERE expires_at <= now() "
    "LIMIT :batch FOR UPDATE SKIP LOCKED), gone AS (DELETE FROM helix.memories m USING victim v "
    "WHERE m.memory_id = v.memory_id RETURNING 1) SELECT count(*) FROM gone"
)


async def prune_expired_batch(conn: Any, batch: int) -> int:
    """Delete up to `batch` expired memories (`helix.checkpoints.prune` calls it until none are left)."""
    return int((await conn.execute(_PRUNE_EXPIRED_BATCH, {"batch": batch})).one()[0])


async def unembedded(conn: AsyncConnection, *, model: str, limit: int | None = None) -> list[str]:
    """Ids of live memories without an embedding (pending or failed), oldest first; also
    those embedded by another model, which this store's searches would not see."""
    cap = "" if limit is None else f" LIMIT {int(limit)}"
    rows = await conn.execute(
        text(
            "SELECT m.memory_id FROM helix.memories m WHERE "
            "(m.embedding_status <> 'complete' OR m.embedding_model IS DISTINCT FROM :model) "
            f"AND {_LIVE} ORDER BY m.created_at, m.memory_id{cap}"
        ),
        {"model": model},
    )
    return [row[0] for row in rows]


async def texts_to_embed(
    conn: AsyncConnection, memory_ids: list[str], *, model: str
) -> tuple[dict[str, str], int]:
    """The texts of these memories that `model` has not embedded yet, and how many of
    them it has: an embed step run again after a crash asks the embedder nothing."""
    rows = await conn.execute(
        text(
            "SELECT memory_id, text, (embedding_status = 'complete' AND embedding_model = "
            ":model) AS done FROM helix.memories WHERE memory_id = ANY(:ids)"
        ),
        {"ids": memory_ids, "model": model},
    )
    todo: dict[str, str] = {}
    done = 0
    for row in rows:
        if row.done:
            done += 1
        else:
            todo[row.memory_id] = row.text
    return todo, done


async def store_embeddings(
    conn: AsyncConnection,
    schema: str,
    model: str,
    dimension: int,
    vectors: dict[str, list[float]],
) -> int:
    """Store embeddings of memories not yet embedded by `model`; returns how many.
    A second writer of the same memory (a replay, another process) changes nothing."""
    rows = [{"id": k, "vec": vector_literal(v)} for k, v in vectors.items()]
    result = await conn.execute(
        text(
            f"UPDATE helix.memories m SET embedding = CAST(v.vec AS {_quoted(schema)}.vector), "
            "embedding_status = 'complete', embedding_model = :model, "
            "embedding_dimension = :dim, embedding_error = NULL, embedded_at = now(), "
            "updated_at = now() FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS v(id text, vec text) "
            "WHERE m.memory_id = v.id AND (m.embedding_status <> 'complete' "
            "OR m.embedding_model IS DISTINCT FROM :model)"
        ),
        {"rows": json.dumps(rows), "model": model, "dim": dimension},
    )
    return int(result.rowcount)


async def mark_unembedded(
    conn: AsyncConnection, memory_ids: list[str], *, failed: bool, error: str
) -> None:
    """Record why embedding did not happen: `failed` for good, else still `pending`."""
    await conn.execute(
        text(
            "UPDATE helix.memories SET embedding_status = :status, embedding_error = :err, "
            "updated_at = now() WHERE memory_id = ANY(:ids) AND embedding_status <> 'complete'"
        ),
        {"ids": memory_ids, "status": "failed" if failed else "pending", "err": error[:2000]},
    )


def _text_candidates(limit: int) -> str:
    return (
        "SELECT m.memory_id, row_number() OVER (ORDER BY ts_rank_cd(m.search, q.q) DESC, "
        "m.created_at DESC) AS rank, ts_rank_cd(m.search, q.q) AS raw "
        f"FROM helix.memories m, (SELECT {_TSQUERY} AS q) q WHERE m.resource_id = :rid "
        f"AND m.search @@ q.q AND {_LIVE} ORDER BY rank LIMIT {int(limit)}"
    )


def _vector_candidates(schema: str, dimension: int, limit: int, exact: bool) -> str:
    """The nearest embeddings of the resource. `exact`: compare every one of them (a
    small resource: through its btree index); else the HNSW index, whose candidates
    are filtered by resource afterwards (fine where the resource is most of the table)."""
    s, dim = _quoted(schema), int(dimension)
    distance = (
        f"CAST(m.embedding AS {s}.vector({dim})) OPERATOR({s}.<=>) CAST(:vec AS {s}.vector({dim}))"
    )
    order = f"({distance}) + 0" if exact else distance  # `+ 0`: an order no index gives
    return (
        "SELECT memory_id, row_number() OVER (ORDER BY d) AS rank, 1 - d AS raw FROM ("
        f"SELECT m.memory_id, {distance} AS d FROM helix.memories m "
        f"WHERE m.embedding_dimension = {dim} AND m.resource_id = :rid "
        f"AND m.embedding_model = :model AND {_LIVE} "
        f"ORDER BY {order} LIMIT {int(limit)}) x"
    )


def search_sql(
    mode: SearchMode, limit: int, schema: str | None, dimension: int | None, exact: bool = False
) -> str:
    """One statement per mode; `hybrid` fuses both lists by reciprocal rank."""
    if mode == "text":
        inner = _text_candidates(limit)
        return (
            f"SELECT {_COLUMNS}, c.raw AS score, c.rank AS text_rank, NULL::bigint AS vector_rank "
            f"FROM ({inner}) c JOIN helix.memories m USING (memory_id) ORDER BY c.rank"
        )
    assert schema is not None and dimension is not None
    if mode == "vector":
        inner = _vector_candidates(schema, dimension, limit, exact)
        return (
            f"SELECT {_COLUMNS}, c.raw AS score, NULL::bigint AS text_rank, c.rank AS vector_rank "
            f"FROM ({inner}) c JOIN helix.memories m USING (memory_id) ORDER BY c.rank"
        )
    k = max(MIN_CANDIDATES, limit * CANDIDATES_PER_RESULT)
    return (
        f"WITH t AS ({_text_candidates(k)}), v AS ({_vector_candidates(schema, dimension, k, exact)}), "
        "f AS (SELECT memory_id, t.rank AS text_rank, v.rank AS vector_rank, "
        f"COALESCE(1.0 / ({RRF_K} + t.rank), 0) + COALESCE(1.0 / ({RRF_K} + v.rank), 0) AS score "
        "FROM t FULL JOIN v USING (memory_id)) "
        f"SELECT {_COLUMNS}, f.score, f.text_rank, f.vector_rank FROM f "
        "JOIN helix.memories m USING (memory_id) "
        f"ORDER BY f.score DESC, m.created_at DESC LIMIT {int(limit)}"
    )


async def search(
    conn: AsyncConnection,
    *,
    mode: SearchMode,
    query: str,
    resource_id: str,
    limit: int,
    schema: str | None = None,
    dimension: int | None = None,
    model: str | None = None,
    vector: list[float] | None = None,
) -> list[MemoryHit]:
    params: dict[str, Any] = {"query": query, "rid": resource_id, "model": model}
    exact = False
    if vector is not None:
        params["vec"] = vector_literal(vector)
        exact = await _is_small(conn, resource_id)
        if not exact:  # more HNSW candidates survive the resource filter
            ef_search = max(HNSW_EF_SEARCH, 2 * limit * CANDIDATES_PER_RESULT)
            await conn.execute(text(f"SET LOCAL hnsw.ef_search = {int(ef_search)}"))
    rows = await conn.execute(text(search_sql(mode, limit, schema, dimension, exact)), params)
    return [
        MemoryHit(_memory(row), float(row.score or 0.0), row.text_rank, row.vector_rank)
        for row in rows
    ]


async def _is_small(conn: AsyncConnection, resource_id: str) -> bool:
    """Whether the resource has fewer than `EXACT_BELOW` memories (counting stops there)."""
    count = (
        await conn.execute(
            text(
                "SELECT count(*) FROM (SELECT 1 FROM helix.memories WHERE resource_id = :rid "
                f"LIMIT {EXACT_BELOW}) x"
            ),
            {"rid": resource_id},
        )
    ).scalar()
    return int(count or 0) < EXACT_BELOW


async def bind_session(conn: AsyncConnection, session_id: str, resource_id: str) -> None:
    await conn.execute(
        text(
            "INSERT INTO helix.session_resources (session_id, resource_id) VALUES (:sid, :rid) "
            "ON CONFLICT (session_id) DO UPDATE SET resource_id = EXCLUDED.resource_id, "
            "bound_at = now()"
        ),
        {"sid": session_id, "rid": resource_id},
    )


async def session_resource(conn: AsyncConnection, session_id: str) -> str:
    """The resource a session's memories belong to: its own binding, its root session's,
    or else the session itself (memories then stay within the session)."""
    row = (
        await conn.execute(
            text(
                "SELECT COALESCE((SELECT resource_id FROM helix.session_resources "
                "WHERE session_id = :sid), (SELECT b.resource_id FROM helix.sessions s "
                "JOIN helix.session_resources b ON b.session_id = s.root_session_id "
                "WHERE s.session_id = :sid))"
            ),
            {"sid": session_id},
        )
    ).scalar()
    return str(row) if row is not None else session_id


async def record_recall(
    conn: AsyncConnection, run_id: str, step: int, memories: list[dict[str, str]]
) -> list[dict[str, str]]:
    """The memories injected at this step: the first attempt's, whatever this one found."""
    row = (
        await conn.execute(
            text(
                "WITH ins AS (INSERT INTO helix.memory_recalls (run_id, step, memories) "
                "VALUES (:rid, :step, CAST(:mems AS jsonb)) ON CONFLICT DO NOTHING "
                "RETURNING memories) SELECT memories FROM ins UNION ALL "
                "SELECT memories FROM helix.memory_recalls WHERE run_id = :rid AND step = :step "
                "LIMIT 1"
            ),
            {"rid": run_id, "step": step, "mems": dumps(memories)},
        )
    ).scalar()
    return list(row or [])


async def recorded_recall(
    conn: AsyncConnection, run_id: str, step: int
) -> list[dict[str, str]] | None:
    row = (
        await conn.execute(
            text("SELECT memories FROM helix.memory_recalls WHERE run_id = :rid AND step = :step"),
            {"rid": run_id, "step": step},
        )
    ).first()
    return None if row is None else list(row[0])
