"""One object for equal frozen values that every run of an agent keeps.

A run keeps its completion rules and limits for its whole life, hours when it waits for
a human; rebuilt per run they cost about 0.9 kB a run (texts, a schema's JSON) that are
the same for every run of an agent. Frozen and compared by value, so sharing one object
changes nothing."""

from __future__ import annotations

from collections.abc import Hashable
from typing import TypeVar

T = TypeVar("T", bound=Hashable)

_KEPT: dict[object, object] = {}
_KEPT_MAX = 512  # distinct values kept; past that (per-run texts, say) each run has its own


def shared(value: T) -> T:
    """The first kept value equal to `value` (of the same class), else `value`."""
    kept = _KEPT.get(value)
    if kept is not None and type(kept) is type(value):
        return kept
    if kept is None and len(_KEPT) < _KEPT_MAX:
        _KEPT[value] = value
    return value
