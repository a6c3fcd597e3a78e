"""Marker files for the test apps run as server subprocesses (`python tests/<x>_app.py`,
so tests/ is on their sys.path): each tool execution or LLM call appends a line to a
file the test reads, fsynced so it survives a SIGKILL right after."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


def marker(markers: Path) -> Callable[..., None]:
    """`mark(name, line="x")`: append `line` to `markers / name`."""

    def mark(name: str, line: str = "x") -> None:
        with open(markers / name, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    return mark


def holding_starts(app: Any, markers: Path, path_prefix: str = "/") -> Any:
    """`app` behind an ASGI wrapper that holds a POST under `path_prefix` whose body names
    a topic beginning with "held" until the test creates `release_start` in `markers`
    (after marking `start_held.log`): the window between a remote parent's start step
    sending its request and the child's run existing."""
    mark = marker(markers)

    async def held(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await app(scope, receive, send)
        if not scope["path"].startswith(path_prefix):
            return await app(scope, receive, send)
        messages = [await receive()]
        while messages[-1].get("more_body"):
            messages.append(await receive())
        if any(b'"held' in m.get("body", b"") for m in messages):
            mark("start_held.log")
            while not (markers / "release_start").exists():
                await asyncio.sleep(0.05)

        async def replay() -> Any:
            return messages.pop(0) if messages else await receive()

        return await app(scope, replay, send)

    return held
