"""`helix.blobs`: the bytes of images and documents, stored once by sha256 (migration 0022).

A blob is immutable and content-addressed, so its insert is idempotent (ON CONFLICT DO
NOTHING) and goes in before any row or checkpoint references it: a crash in between
leaves at worst an unreferenced blob, never a reference without its bytes. Messages,
checkpoints and DBOS step outputs carry only the `StoredBlob` reference.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import text

from helix_dbos.orchestration.parts import BinaryContent, StoredBlob
from helix_dbos.store.repository import SQLConnection

_INSERT = text(
    "INSERT INTO helix.blobs (sha256, media_type, size, data) "
    "SELECT * FROM unnest(CAST(:shas AS text[]), CAST(:types AS text[]), "
    "CAST(:sizes AS bigint[]), CAST(:datas AS bytea[])) ON CONFLICT (sha256) DO NOTHING"
)
_SELECT = text("SELECT sha256, data FROM helix.blobs WHERE sha256 = ANY(CAST(:shas AS text[]))")
_ONE = text("SELECT media_type, size, data FROM helix.blobs WHERE sha256 = :sha")


def reference(part: BinaryContent) -> StoredBlob:
    """The reference a message keeps in place of the bytes."""
    return StoredBlob(
        sha256=part.sha256,
        media_type=part.media_type,
        size=len(part.data),
        identifier=part.identifier,
    )


async def put_blobs(conn: SQLConnection, parts: Sequence[BinaryContent]) -> list[StoredBlob]:
    """Store each part's bytes (once: a blob already there is left as it is) and return
    the references, in order."""
    refs = [reference(p) for p in parts]
    unique = {r.sha256: (r, p) for r, p in zip(refs, parts, strict=True)}
    if unique:
        await conn.execute(
            _INSERT,
            {
                "shas": list(unique),
                "types": [r.media_type for r, _ in unique.values()],
                "sizes": [r.size for r, _ in unique.values()],
                "datas": [p.data for _, p in unique.values()],
            },
        )
    return refs


async def get_blobs(conn: SQLConnection, shas: Iterable[str]) -> dict[str, bytes]:
    """The bytes of the blobs found, by sha256."""
    wanted = sorted(set(shas))
    if not wanted:
        return {}
    rows = await conn.execute(_SELECT, {"shas": wanted})
    return {row[0]: bytes(row[1]) for row in rows}


@dataclass(frozen=True)
class Blob:
    media_type: str
    size: int
    data: bytes


async def get_blob(conn: SQLConnection, sha256: str) -> Blob | None:
    """One blob with its media type, for a download."""
    row = (await conn.execute(_ONE, {"sha": sha256})).first()
    return Blob(row[0], int(row[1]), bytes(row[2])) if row else None
