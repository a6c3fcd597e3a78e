"""The code of an earlier release, from the git history, and how to run it (the release
test and the upgrade from an older build use it)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from helpers import skip_or_fail_in_ci
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parent.parent
PIN = REPO / ".ci" / "previous-release"


@dataclass(frozen=True)
class PreviousRelease:
    commit: str
    version: str


@dataclass(frozen=True)
class Interpreter:
    """How to run code of a release: a python and what to put on its PYTHONPATH."""

    python: str
    path: str | None


def previous_release() -> PreviousRelease:
    line = next(x for x in PIN.read_text().splitlines() if x.strip() and not x.startswith("#"))
    commit, version = line.split()
    return PreviousRelease(commit, version)


def unsatisfied(pyproject: Path) -> list[str]:
    """The release's dependencies that this venv does not satisfy."""
    import tomllib  # noqa: PLC0415 - Python 3.11+; the 3.10 CI run skips crash tests

    declared = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    missing_ones = []
    for spec in declared:
        requirement = Requirement(spec)
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        try:
            installed = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            missing_ones.append(spec)
            continue
        if not requirement.specifier.contains(installed, prereleases=True):
            missing_ones.append(spec)
    return missing_ones


def previous_code(release: PreviousRelease, into: Path) -> Interpreter:
    """The release's code, extracted from the git history, and how to run it."""
    found = subprocess.run(
        ["git", "-C", str(REPO), "cat-file", "-e", f"{release.commit}^{{commit}}"],
        capture_output=True,
    )
    if found.returncode != 0:
        skip_or_fail_in_ci(
            f"commit {release.commit} (release {release.version}, pinned in {PIN}) is not in "
            "this clone's history: fetch it (git fetch --unshallow, or fetch depth 0 in CI)"
        )
    into.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", release.commit, "helix_dbos", "migrations"]
        + ["pyproject.toml"],
        capture_output=True,
        check=True,
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    if not unsatisfied(into / "pyproject.toml"):
        return Interpreter(sys.executable, str(into))
    venv = REPO / ".ci" / "previous" / release.commit / "venv"  # built once per release
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [str(venv / "bin" / "pip"), "install", "-q", str(into)], check=True, timeout=900
        )
    return Interpreter(str(venv / "bin" / "python"), None)
