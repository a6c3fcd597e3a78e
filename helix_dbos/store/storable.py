"""What PostgreSQL can store: `text` and `jsonb` reject NUL (U+0000), and UTF-8 has no
lone surrogates (U+D800..U+DFFF).

The policy: what a user hands in through the API (ids, input, state, answers) is
checked at the edge and refused with an error naming the field (`check_storable`);
what arrives from elsewhere (a model's text or tool arguments, a tool's output, a raw
DBOS message) is stored with each such character replaced by U+FFFD, so a run never
fails or sticks on it (`storable`, `dumps`).
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from pydantic import BaseModel

from helix_dbos.errors import InvalidInputError

M = TypeVar("M", bound=BaseModel)

REPLACEMENT = "\ufffd"
# Deeper JSON is refused at the edge: past a few hundred levels, recursive serializers
# (pydantic's, the providers' SDKs') fail, and a run with such a state would fail with it.
MAX_DEPTH = 100
CUT_TOO_DEEP = f"[cut: nested more than {MAX_DEPTH} levels deep]"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
# In json.dumps output (ASCII): an escaped NUL, or a surrogate escape that is not half
# of a pair. A false hit (an escaped backslash before "u0000") only costs the slow path.
_UNSTORABLE_ESCAPE = re.compile(
    r"\\u0000|\\ud[89ab][0-9a-f]{2}(?!\\ud[c-f][0-9a-f]{2})"
    r"|(?<!\\ud[89ab][0-9a-f]{2})\\ud[c-f][0-9a-f]{2}"
)


def storable_text(text: str) -> str:
    return _UNSTORABLE.sub(REPLACEMENT, text)


def storable(value: Any) -> Any:
    """`value` with every string (and dict key) made storable."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [storable(v) for v in value]
    return value


def cut_deep(value: Any, levels: int = MAX_DEPTH) -> Any:
    """`value` with lists and objects nested past `levels` replaced by `CUT_TOO_DEEP`."""
    if isinstance(value, dict | list | tuple) and levels <= 0:
        return CUT_TOO_DEEP
    if isinstance(value, dict):
        return {k: cut_deep(v, levels - 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [cut_deep(v, levels - 1) for v in value]
    return value


def storable_model(model: M) -> M:
    """A pydantic model (a model's reply, say) with every string made storable and any
    nesting past `MAX_DEPTH` cut (a prompt-injected model's 500-deep arguments would
    fail the step's checkpoint, and the run); the model itself when it already is."""
    data = model.model_dump()
    if depth_exceeds(data, MAX_DEPTH):
        return type(model).model_validate(storable(cut_deep(data)))
    if unstorable_path(data, "") is None:
        return model
    return type(model).model_validate(storable(data))


def dumps(value: Any) -> str:
    """JSON text PostgreSQL accepts as `jsonb`; the usual case costs one regex scan."""
    out = json.dumps(value, default=str)
    if "\\u" in out and _UNSTORABLE_ESCAPE.search(out):
        out = json.dumps(storable(json.loads(out)))
    return out


def unstorable_path(value: Any, path: str) -> str | None:
    """Where in `value` the first unstorable character is (`path`, `path.key`, `path[2]`)."""
    if isinstance(value, str):
        return path if _UNSTORABLE.search(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and _UNSTORABLE.search(key):
                return f"{path} (a key)"
            found = unstorable_path(item, f"{path}.{key}")
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found = unstorable_path(item, f"{path}[{i}]")
            if found is not None:
                return found
    return None


def depth_exceeds(value: Any, limit: int) -> bool:
    """True when dicts and lists in `value` nest deeper than `limit` (no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth + 1 > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def check_storable(**fields: Any) -> None:
    """Refuse input PostgreSQL cannot store, or nested deeper than `MAX_DEPTH`, naming
    the field (a 422 over HTTP)."""
    for name, value in fields.items():
        if depth_exceeds(value, MAX_DEPTH):
            raise InvalidInputError(
                f"{name} nests lists and objects more than {MAX_DEPTH} levels deep; flatten it"
            )
        where = unstorable_path(value, name)
        if where is not None:
            raise InvalidInputError(
                f"{where} contains a NUL character or a lone surrogate, which PostgreSQL "
                "cannot store; remove it"
            )
