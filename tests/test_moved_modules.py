"""Runs checkpointed before issue 47's layout pickled classes under their old module
names (`helix_dbos.runtime.step_types`, ...): this code must still unpickle them, to the
same classes, without importing a second copy of any module."""

from __future__ import annotations

import importlib
import pickle
import subprocess
import sys

import helix_dbos
from helix_dbos import moved_modules
from helix_dbos.runtime.steps.step_types import ToolOutcome


def old_pickle(value: object, old_module: str) -> bytes:
    """`value` pickled as a release before the move wrote it: protocol 2 names a class
    by `module\\nname\\n`, so the new module's name can be swapped for the old one."""
    module = type(value).__module__
    data = pickle.dumps(value, protocol=2)
    assert module.encode() + b"\n" in data
    return data.replace(module.encode() + b"\n", old_module.encode() + b"\n")


def test_a_class_pickled_under_its_old_module_unpickles_to_the_same_class():
    outcome = ToolOutcome(success=True, content="done")
    data = old_pickle(outcome, "helix_dbos.runtime.step_types")
    assert b"helix_dbos.runtime.step_types\n" in data
    restored = pickle.loads(data)
    assert type(restored) is ToolOutcome
    assert restored == outcome


def test_an_old_name_is_the_new_module_itself_and_keeps_its_spec():
    new = importlib.import_module("helix_dbos.runtime.loop.agent_loop")
    old = importlib.import_module("helix_dbos.runtime.agent_loop")
    assert old is new
    assert new.__spec__ is not None and new.__spec__.name == "helix_dbos.runtime.loop.agent_loop"


def test_every_old_name_resolves_in_a_fresh_interpreter():
    """Each entry names a module that exists (a typo in the table would only show when
    an old run is replayed), and importing `helix_dbos` alone installs the finder."""
    code = (
        "import importlib, helix_dbos\n"
        "from helix_dbos.moved_modules import MOVED\n"
        "for old, new in MOVED.items():\n"
        "    assert importlib.import_module(old) is importlib.import_module(new), old\n"
        "print(len(MOVED))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == len(moved_modules.MOVED) > 40


def test_unknown_names_still_fail_to_import():
    assert helix_dbos is not None
    try:
        importlib.import_module("helix_dbos.runtime.no_such_module")
    except ModuleNotFoundError:
        pass
    else:
        raise AssertionError("an unknown module imported")
