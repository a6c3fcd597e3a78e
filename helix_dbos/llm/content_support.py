"""Which models take which content parts (images, PDFs, URLs), checked before a run.

A part the model cannot take must fail at `execute()` with a clear error, not as the
provider's 400 in the middle of a run. Only what is known to fail is refused: a model
this table does not know (an OpenAI-compatible server's, a registered provider's) is
left to try.
"""

from __future__ import annotations

import re

from helix_dbos.orchestration.parts import (
    BinaryContent,
    DocumentUrl,
    ImageUrl,
    StoredBlob,
    UserPart,
)

# Known text-only OpenAI models: no image and no file input.
_OPENAI_TEXT_ONLY = re.compile(
    r"^(gpt-3\.5|gpt-4(-\d{4})?$|gpt-4-32k|o1-mini|o3-mini|davinci|babbage)"
)
_ANTHROPIC_TEXT_ONLY = re.compile(r"^claude-(2|instant)")


def _kind(part: UserPart | StoredBlob) -> str:
    """ "image", "document" or "text" (a text/* document, which any model takes as text),
    with "-url" for a part the provider fetches."""
    if isinstance(part, ImageUrl):
        return "image-url"
    if isinstance(part, DocumentUrl):
        return "document-url"
    media_type = part.media_type.lower()
    if media_type.startswith("image/"):
        return "image"
    return "text" if media_type.startswith("text/") else "document"


def part_problem(model: str, part: UserPart | StoredBlob) -> str | None:
    """Why `model` (`provider:name`) cannot take `part`, or None."""
    provider, _, name = model.partition(":")
    kind = _kind(part)
    if kind == "text":
        return None  # sent as text by every adapter
    if provider == "anthropic" and _ANTHROPIC_TEXT_ONLY.match(name):
        return f"model {model!r} takes no images or documents"
    if provider in ("openai", "openai-responses"):
        if _OPENAI_TEXT_ONLY.match(name):
            return f"model {model!r} takes no images or documents"
        if provider == "openai" and kind == "document-url":
            return (
                f"model {model!r} (Chat Completions) takes a document only as data, not by "
                "URL: pass BinaryContent, or use 'openai-responses:'"
            )
    return None


def check_parts(model: str, parts: list[UserPart] | list[BinaryContent]) -> str | None:
    """The first part `model` cannot take, described, or None."""
    for i, part in enumerate(parts):
        problem = part_problem(model, part)
        if problem:
            return f"part {i}: {problem}"
    return None
