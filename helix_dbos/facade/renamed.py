"""Public names of the previous release that moved to a sub-API (issue 47 item 6):
`helix.schedule(...)` is now `helix.schedules.create(...)`. Each old name still works
for one release; its first use in a process warns once, naming its replacement."""

from __future__ import annotations

import warnings
from typing import Any

_warned: set[str] = set()


class Renamed:
    """A class attribute standing for `replacement`, a dotted path from the instance
    (`"schedules.create"`): reading it warns once, then gives the replacement."""

    def __init__(self, replacement: str) -> None:
        self.replacement = replacement
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = f"{owner.__name__}.{name}"

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        if instance is None:
            return self
        if self.name not in _warned:
            _warned.add(self.name)
            warnings.warn(
                f"{self.name}() is deprecated: use helix.{self.replacement}() "
                "(the old name goes in the next release)",
                DeprecationWarning,
                stacklevel=2,
            )
        target: Any = instance
        for part in self.replacement.split("."):
            target = getattr(target, part)
        return target
