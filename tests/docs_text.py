"""The documentation as tests read it: the README and every page of docs/.

The README is the front door and docs/ the site; a test that checks what the
documentation says looks it up here, so a section can move between pages
without the test losing sight of it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import forkserver

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS = REPO / "docs"

#: Each page's text by its path from the repository root, the README first.
PAGES: dict[str, str] = {
    str(path.relative_to(REPO)): path.read_text() for path in [README, *sorted(DOCS.rglob("*.md"))]
}
#: Every page, one after the other.
TEXT = "\n".join(PAGES.values())

_HEADING = re.compile(r"(#{1,6}) (.+)")


def _headings(text: str) -> list[tuple[int, int, str]]:
    """(offset, level, title) of each heading outside code fences."""
    found: list[tuple[int, int, str]] = []
    offset, fenced = 0, False
    for line in text.splitlines(keepends=True):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := _HEADING.fullmatch(line.rstrip("\n"))):
            found.append((offset, len(match.group(1)), match.group(2).strip()))
        offset += len(line)
    return found


def section(title: str) -> str:
    """The section headed `title` (any level, on any page), up to the next heading of
    its level or above; a page's title heads the whole page. Exactly one may match."""
    matches = []
    for text in PAGES.values():
        headings = _headings(text)
        for i, (start, level, name) in enumerate(headings):
            if name == title:
                end = next((o for o, lv, _ in headings[i + 1 :] if lv <= level), len(text))
                matches.append(text[start:end])
    assert len(matches) == 1, f"{len(matches)} sections are titled {title!r}"
    return matches[0]


def code_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def env_for(database_url: str, **extra: str) -> dict[str, str]:
    """A user's environment: none of helix's or the providers' variables, the test
    database as HELIX_DATABASE_URL, and `extra`."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("HELIX_", "ANTHROPIC_", "OPENAI_"))
    }
    return {**env, "HELIX_DATABASE_URL": database_url, **extra}


def run_pasted(
    snippet: str,
    database_url: str,
    workdir: Path,
    *,
    name: str = "example.py",
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run a page's Python example as pasted: a script of its own in `workdir`, in
    `env_for(database_url)`."""
    script = workdir / name
    script.write_text(snippet)
    return forkserver.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env_for(database_url),
        cwd=workdir,
    )
