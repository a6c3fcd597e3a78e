"""Every module of the package, the examples and the test apps imports (or compiles) on the
running Python: CI's Python 3.10 phase leans on this to find syntax, stdlib names and
dependency versions that only the lowest declared Python lacks (see `.ci/run`)."""

from __future__ import annotations

import compileall
import importlib
import pkgutil
import re
import sys
from pathlib import Path

import helix_dbos

REPO = Path(__file__).resolve().parent.parent
MODULES = sorted(
    info.name
    for info in pkgutil.walk_packages(helix_dbos.__path__, prefix="helix_dbos.")
    if not info.name.endswith("__main__")
)


def test_the_walk_finds_the_package_s_folders():
    """The list below is not empty by accident (a renamed package, a missing __init__)."""
    assert "helix_dbos.cli" in MODULES
    assert len({name.split(".")[1] for name in MODULES}) >= 10


def test_every_module_imports():
    """Importing runs each module's top level: decorators, dataclasses, annotations evaluated
    at import time (pydantic's), and every name it takes from the stdlib or a dependency."""
    failed: dict[str, str] = {}
    for module in MODULES:
        try:
            importlib.import_module(module)
        except Exception as exc:  # every failure listed, not only the first
            failed[module] = f"{type(exc).__name__}: {exc}"
    assert not failed, failed


def test_examples_benchmarks_and_test_apps_compile():
    """Scripts that only run as subprocesses or by hand still parse on this Python."""
    for folder in ("examples", "benchmarks", "tests", "scripts"):
        if (REPO / folder).is_dir():
            assert compileall.compile_dir(
                REPO / folder, quiet=1, rx=re.compile(r"node_modules"), force=True
            ), f"{folder}/ does not compile on Python {sys.version_info[:2]}"
