"""Where named tools (`tools=["__complete__"]`) come from, handed in from the top.

`definitions/tool.py` resolves a tool's name, but the modules that register the named
tools (`builtins.py`, `memory/tools.py`) sit above it and load DBOS: the package's
`__init__` adds a loader for them here, and `named_tool` runs the loaders the first time
it meets an unknown name. A leaf module with no imports, so `import helix_dbos` stays light.
"""

from __future__ import annotations

from collections.abc import Callable

SOURCES: list[Callable[[], None]] = []


def add_source(load: Callable[[], None]) -> None:
    """`load()` registers named tools (by importing their module); added once."""
    if load not in SOURCES:
        SOURCES.append(load)


def load_sources() -> None:
    for load in SOURCES:
        load()
