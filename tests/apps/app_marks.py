"""Marker files for the test apps run as server subprocesses (`python tests/<x>_app.py`,
so tests/ is on their sys.path): each tool execution or LLM call appends a line to a
file the test reads, fsynced so it survives a SIGKILL right after."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def marker(markers: Path) -> Callable[..., None]:
    """`mark(name, line="x")`: append `line` to `markers / name`."""

    def mark(name: str, line: str = "x") -> None:
        with open(markers / name, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    return mark
