"""Files in the protocols' user messages as helix content parts (docs/content-parts.md).

The AI SDK's UI `file` part (`{type: "file", mediaType, filename, url}`, the url a
`data:` URL or an http(s) one) and AG-UI's `binary` input content (`{type: "binary",
mimeType, data | url, filename}`) both become a `BinaryContent` for inline bytes and an
`ImageUrl` or `DocumentUrl` for a URL; what is neither is a `ContentPartError` (422).
"""

from __future__ import annotations

import base64
import binascii
import re

from helix_dbos.errors import ContentPartError
from helix_dbos.orchestration.parts import BinaryContent, DocumentUrl, ImageUrl, UserPart

_DATA_URL = re.compile(r"data:([\w.+-]+/[\w.+-]+)?(?:;[\w=.+-]+)*?;base64,(.*)", re.S)


def _decode(data: str, where: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ContentPartError(f"{where}: the data is not valid base64") from None


def file_part(
    *, media_type: str | None, url: str | None, data: str | None, filename: str | None, where: str
) -> UserPart:
    """One file as a part: base64 `data`, or a `url` (a `data:` URL counts as data)."""
    if data is None and url is not None and url.startswith("data:"):
        match = _DATA_URL.fullmatch(url)
        if match is None:
            raise ContentPartError(f"{where}: only base64 data URLs are accepted")
        media_type, data = media_type or match.group(1), match.group(2)
    if data is not None:
        if not media_type:
            raise ContentPartError(f"{where}: a file needs its media type")
        return BinaryContent(data=_decode(data, where), media_type=media_type, identifier=filename)
    if url is None:
        raise ContentPartError(f"{where}: a file needs data or a url")
    if (media_type or "").startswith("image/"):
        return ImageUrl(url=url, media_type=media_type, identifier=filename)
    return DocumentUrl(url=url, media_type=media_type, identifier=filename)
