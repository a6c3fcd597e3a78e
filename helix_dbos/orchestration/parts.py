"""Content parts: images and documents beside a message's text (issue 49), pure values.

The names and shapes follow pydantic-ai (`BinaryContent`, `ImageUrl`, `DocumentUrl`), so
code written for it reads the same here. A transcript never holds the bytes: a
`BinaryContent` is stored once in `helix.blobs` (keyed by its sha256) and the message keeps
a `StoredBlob`, the reference; the LLM step turns the reference back into a
`BinaryContent` for the adapter only, so checkpoints and rows stay small.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from typing import Annotated, Any, Literal
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field

DOCUMENT_TYPES = frozenset({"application/pdf"})
#: Text-like documents some providers take inline as plain text.
TEXT_DOCUMENT_PREFIXES = ("text/",)
# Defaults of the size limits (bytes): Anthropic's and OpenAI's request limits sit at
# about 32 MB and their per-image limits lower, so a part over 20 MB or a message over
# 32 MB could only come back as a provider's 400 mid-run.
MAX_PART_BYTES = 20 * 1024 * 1024
MAX_MESSAGE_BYTES = 32 * 1024 * 1024


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BinaryContent(_Part):
    """Bytes the model should see: an image (`image/png`, ...) or a document
    (`application/pdf`). `identifier` names it in the transcript, the CLI and the inbox."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, ser_json_bytes="base64", val_json_bytes="base64"
    )

    data: bytes
    media_type: str
    identifier: str | None = None
    kind: Literal["binary"] = "binary"

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def is_image(self) -> bool:
        return self.media_type.startswith("image/")

    @property
    def is_document(self) -> bool:
        return not self.is_image

    def __repr__(self) -> str:  # never a megabyte of bytes in a log line
        return f"BinaryContent(media_type={self.media_type!r}, size={len(self.data)})"


class ImageUrl(_Part):
    """An image the provider fetches itself (`https://...`)."""

    url: str
    media_type: str | None = None
    identifier: str | None = None
    kind: Literal["image-url"] = "image-url"

    @property
    def is_image(self) -> bool:
        return True


class DocumentUrl(_Part):
    """A document (a PDF) the provider fetches itself."""

    url: str
    media_type: str | None = None
    identifier: str | None = None
    kind: Literal["document-url"] = "document-url"

    @property
    def is_image(self) -> bool:
        return False


class StoredBlob(_Part):
    """A `BinaryContent` as transcripts, checkpoints and the API carry it: its bytes are
    the `helix.blobs` row with this `sha256`."""

    sha256: str
    media_type: str
    size: int
    identifier: str | None = None
    kind: Literal["blob"] = "blob"

    @property
    def is_image(self) -> bool:
        return self.media_type.startswith("image/")

    @property
    def name(self) -> str:
        """A file name for a link or a download."""
        return self.identifier or f"{self.sha256[:12]}{_extension(self.media_type)}"


#: What a user or a tool hands in besides text.
UserPart = BinaryContent | ImageUrl | DocumentUrl
#: What a message carries besides its text: a stored reference or a URL (and, only in a
#: request on its way to an adapter, the resolved `BinaryContent`).
Attachment = Annotated[
    StoredBlob | ImageUrl | DocumentUrl | BinaryContent, Field(discriminator="kind")
]
PART_TYPES = (BinaryContent, ImageUrl, DocumentUrl)


def _extension(media_type: str) -> str:
    sub = media_type.partition("/")[2].split(";")[0].split("+")[0]
    return f".{sub}" if sub.isalnum() and len(sub) <= 8 else ""


def is_part(value: object) -> bool:
    return isinstance(value, PART_TYPES)


def split_input(value: str | Sequence[Any] | None) -> tuple[str | None, list[UserPart]]:
    """`execute()`'s input as (its text, its parts): strings join with blank lines, in
    order; anything else in the sequence is a `ValueError`."""
    if value is None or isinstance(value, str):
        return value, []
    if isinstance(value, bytes | bytearray) or not isinstance(value, Sequence):
        raise ValueError(
            "input must be a str or a sequence of str, BinaryContent, ImageUrl and DocumentUrl"
        )
    texts: list[str] = []
    parts: list[UserPart] = []
    for i, item in enumerate(value):
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, PART_TYPES):
            parts.append(item)
        else:
            raise ValueError(
                f"input[{i}] is a {type(item).__name__}: expected str, BinaryContent, "
                "ImageUrl or DocumentUrl"
            )
    return ("\n\n".join(texts) if texts else None), parts


def split_tool_value(value: Any) -> tuple[Any, list[UserPart]]:
    """A tool's return value as (the rest, its parts): a part alone, or the parts of a
    list or tuple mixing text and parts. The rest is `None` when only parts were left."""
    if isinstance(value, PART_TYPES):
        return None, [value]
    if isinstance(value, list | tuple) and any(isinstance(v, PART_TYPES) for v in value):
        parts = [v for v in value if isinstance(v, PART_TYPES)]
        rest = [v for v in value if not isinstance(v, PART_TYPES)]
        if not rest:
            return None, parts
        return (rest[0] if len(rest) == 1 else rest), parts
    return value, []


def size_problem(parts: Sequence[UserPart], max_part: int, max_message: int) -> str | None:
    """Why these parts may not go into one message (too big), or None."""
    total = 0
    for i, part in enumerate(parts):
        if isinstance(part, BinaryContent):
            size = len(part.data)
            if size > max_part:
                return f"part {i} ({part.media_type}) is {size} bytes, over the limit of {max_part}"
            total += size
        else:
            problem = url_problem(part.url)
            if problem:
                return f"part {i}: {problem}"
    if total > max_message:
        return f"the message's parts are {total} bytes, over the limit of {max_message}"
    return None


def url_problem(url: str) -> str | None:
    """Only http(s) URLs go to a provider (never `file:` or `javascript:`)."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        return f"{url[:80]!r} is not an http(s) URL"
    return None


def media_problem(part: UserPart) -> str | None:
    """A media type no provider takes as a part, or None."""
    media_type = (part.media_type or "").lower()
    if isinstance(part, ImageUrl) or (isinstance(part, BinaryContent) and part.is_image):
        return None
    if isinstance(part, DocumentUrl) and not media_type:
        return None
    if media_type in DOCUMENT_TYPES or media_type.startswith(TEXT_DOCUMENT_PREFIXES):
        return None
    return f"media type {part.media_type!r} is neither an image nor a PDF or text document"


def attachment_names(attachments: Sequence[StoredBlob | ImageUrl | DocumentUrl]) -> str:
    """The text that stands for a tool's parts when it returned nothing else."""
    names = [a.name if isinstance(a, StoredBlob) else (a.identifier or a.url) for a in attachments]
    return "Attached: " + ", ".join(names)


def base64_data(part: BinaryContent) -> str:
    """The part's bytes as the base64 text every provider's JSON takes."""
    return base64.b64encode(part.data).decode("ascii")


def data_url(part: BinaryContent) -> str:
    """`data:<media type>;base64,...`: how OpenAI takes an image or a file's bytes inline."""
    return f"data:{part.media_type};base64,{base64_data(part)}"


def is_text_document(part: BinaryContent) -> bool:
    """A `text/*` document, which adapters send as text."""
    return part.media_type.lower().startswith(TEXT_DOCUMENT_PREFIXES)


def text_of(part: BinaryContent) -> str:
    return part.data.decode("utf-8", errors="replace")


def unresolved(part: StoredBlob) -> ValueError:
    """A reference that reached an adapter: the runtime resolves them all before a call."""
    return ValueError(f"content part {part.sha256} was not resolved to its bytes")
