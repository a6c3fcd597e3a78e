"""The inbox's files (HTML, script, style), read once from the package."""

from __future__ import annotations

from functools import cache
from importlib import resources


@cache
def page(name: str) -> str:
    return resources.files("helix_dbos.server").joinpath(name).read_text("utf-8")
