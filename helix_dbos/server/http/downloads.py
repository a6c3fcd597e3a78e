"""Serving a stored content part (an image, a PDF) so that no browser runs it.

A part is whatever a user or a tool sent: its media type may say `text/html` and its
bytes hold a script. It is served as an attachment (`Content-Disposition`), with
`X-Content-Type-Options: nosniff` and a CSP that sandboxes it should a browser open it
anyway, and under its media type only when that is a plain `type/subtype`.
"""

from __future__ import annotations

import re
from urllib.parse import quote

from fastapi import Response

SHA256 = re.compile(r"[0-9a-f]{64}")
_MEDIA_TYPE = re.compile(r"[A-Za-z0-9][\w.+-]*/[A-Za-z0-9][\w.+-]*")
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")


def download(data: bytes, media_type: str, filename: str) -> Response:
    """The bytes as a download named `filename`."""
    kind = media_type if _MEDIA_TYPE.fullmatch(media_type) else "application/octet-stream"
    ascii_name = _SAFE_NAME.sub("_", filename)[:120] or "part"
    disposition = (
        f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(filename[:120], safe='')}"
    )
    return Response(
        content=data,
        media_type=kind,
        headers={
            "Content-Disposition": disposition,
            "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "default-src 'none'; sandbox",
            "Cache-Control": "private, max-age=3600",
        },
    )
