"""Content parts in a run: the bytes stored once before anything references them, and
resolved back only for the adapter (issue 49).

`store_parts` runs before the row or checkpoint that will hold the references (a run's
input message, a tool step's output), so no reference ever lacks its bytes; its insert
is idempotent, so a retried or replayed step writes nothing twice. `resolve_request`
swaps each `StoredBlob` of a request for its `BinaryContent`, from a bounded in-process
cache first: a 20-step run that carries a PDF reads it from SQL once per process.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from helix_dbos.errors import ContentPartError, ContentTooLargeError
from helix_dbos.llm.content_support import check_parts
from helix_dbos.orchestration.parts import (
    MAX_MESSAGE_BYTES,
    MAX_PART_BYTES,
    BinaryContent,
    DocumentUrl,
    ImageUrl,
    StoredBlob,
    UserPart,
    media_problem,
    size_problem,
)
from helix_dbos.orchestration.types import LLMRequest, Message
from helix_dbos.runtime.process.process_runtime import Runtime
from helix_dbos.store.driver import DriverConnection
from helix_dbos.store.features import blobs as blob_sql
from helix_dbos.store.storable import check_storable

Reference = StoredBlob | ImageUrl | DocumentUrl


class BlobCache:
    """The most recently used blobs' bytes, up to `max_bytes` in all."""

    def __init__(self, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, bytes] = OrderedDict()
        self._size = 0

    def get(self, sha256: str) -> bytes | None:
        data = self._items.get(sha256)
        if data is not None:
            self._items.move_to_end(sha256)
        return data

    def put(self, sha256: str, data: bytes) -> None:
        if len(data) > self.max_bytes or sha256 in self._items:
            return
        self._items[sha256] = data
        self._size += len(data)
        while self._size > self.max_bytes:
            _, dropped = self._items.popitem(last=False)
            self._size -= len(dropped)


CACHE = BlobCache()


def check_user_parts(model: str, parts: Sequence[UserPart], what: str = "input") -> None:
    """Refuse parts that could only fail later: a wrong type, too big, or one `model`
    cannot take (`ContentTooLargeError`, `ContentPartError`)."""
    for i, part in enumerate(parts):
        if not isinstance(part, BinaryContent | ImageUrl | DocumentUrl):
            raise ContentPartError(f"{what} part {i} is a {type(part).__name__}")
        problem = media_problem(part)
        if problem:
            raise ContentPartError(f"{what} part {i}: {problem}")
        check_storable(**{f"{what}[{i}]": part.model_dump(exclude={"data"})})
    too_big = size_problem(parts, MAX_PART_BYTES, MAX_MESSAGE_BYTES)
    if too_big:
        kind = ContentTooLargeError if "bytes" in too_big else ContentPartError
        raise kind(f"{what}: {too_big}")
    unreadable = check_parts(model, list(parts))
    if unreadable:
        raise ContentPartError(f"{what}: {unreadable}")


async def store_parts(rt: Runtime, parts: Sequence[UserPart]) -> list[Reference]:
    """Each `BinaryContent`'s bytes in `helix.blobs` (once), and the references to keep."""
    binaries = [p for p in parts if isinstance(p, BinaryContent)]
    refs: dict[int, StoredBlob] = {}
    if binaries:

        async def put(conn: DriverConnection) -> list[StoredBlob]:
            return await blob_sql.put_blobs(conn, binaries)

        stored = await rt.on_connection("store content parts", put)
        for part, ref in zip(binaries, stored, strict=True):
            refs[id(part)] = ref
            CACHE.put(ref.sha256, part.data)
    return [refs[id(p)] if isinstance(p, BinaryContent) else p for p in parts]


def _stored(messages: Sequence[Message]) -> set[str]:
    return {a.sha256 for m in messages for a in m.attachments if isinstance(a, StoredBlob)}


async def resolve_request(rt: Runtime, request: LLMRequest) -> LLMRequest:
    """The request with each stored reference replaced by its bytes (for the adapter)."""
    wanted = _stored(request.messages)
    if not wanted:
        return request
    found = {sha: data for sha in wanted if (data := CACHE.get(sha)) is not None}
    missing = wanted - found.keys()
    if missing:

        async def get(conn: DriverConnection) -> dict[str, bytes]:
            return await blob_sql.get_blobs(conn, missing)

        for sha, data in (await rt.on_connection("read content parts", get)).items():
            CACHE.put(sha, data)
            found[sha] = data
    lost = wanted - found.keys()
    if lost:
        raise ContentPartError(f"content part blob(s) missing from helix.blobs: {sorted(lost)}")
    messages = [_resolved(m, found) for m in request.messages]
    return request.model_copy(update={"messages": messages})


def _resolved(message: Message, found: dict[str, bytes]) -> Message:
    if not any(isinstance(a, StoredBlob) for a in message.attachments):
        return message
    attachments = [
        BinaryContent(data=found[a.sha256], media_type=a.media_type, identifier=a.name)
        if isinstance(a, StoredBlob)
        else a
        for a in message.attachments
    ]
    return message.model_copy(update={"attachments": attachments})
