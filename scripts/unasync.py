"""Make the sync client from the async one, so each client method is written once.

`helix_dbos/client/aio.py` and `aio_schedules.py` are the source; this script rewrites
their tokens (`async def` -> `def`, `await ` -> ``, `AsyncHelixClient` -> `HelixClient`,
...) into `sync.py` and `sync_schedules.py`, and formats them with ruff so the output
is what `ruff format` would leave. httpcore keeps its sync code the same way.

    python scripts/unasync.py          # write the sync files
    python scripts/unasync.py --check  # exit 1 if a sync file is not current

(`--client-dir DIR` works on a copy of the client folder instead: the tests use it.)
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CLIENT = REPO / "helix_dbos" / "client"

# source -> generated, inside helix_dbos/client/
FILES = {"aio.py": "sync.py", "aio_schedules.py": "sync_schedules.py"}

# (pattern, replacement), applied in order; a pattern matches whole tokens only.
SUBSTITUTIONS = [
    (r"async def\b", "def"),
    (r"async with\b", "with"),
    (r"async for\b", "for"),
    (r"await ", ""),
    (r"\bimport asyncio\b", "import time"),
    (r"\basyncio\.sleep\b", "time.sleep"),
    (r"\bAsyncIterator\b", "Iterator"),
    (r"\bAsyncHelixClient\b", "HelixClient"),
    (r"\bAsyncScheduleCalls\b", "ScheduleCalls"),
    (r"\bhttpx\.AsyncClient\b", "httpx.Client"),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aexit__\b", "__exit__"),
    (r"\baclose\b", "close"),
    (r"\baread\b", "read"),
    (r"\baiter_lines\b", "iter_lines"),
    (r"\bclient\.aio_schedules\b", "client.sync_schedules"),
    (r"\bfrom async code\b", "from sync code"),
]


def header(source: str) -> str:
    return f"# Generated from {source} by scripts/unasync.py; do not edit.\n"


def unasync(text: str) -> str:
    for pattern, replacement in SUBSTITUTIONS:
        text = re.sub(pattern, replacement, text)
    return text


def ruff(text: str, target: str, *command: str) -> str:
    """The text as `ruff COMMAND` leaves it, with the repository's settings."""
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *command, "--stdin-filename", f"helix_dbos/client/{target}"],
        input=text,
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    return done.stdout


def generated(client: Path, source: str, target: str) -> str:
    """Renamed modules sort elsewhere: imports are sorted again, then the file formatted."""
    text = header(source) + unasync((client / source).read_text(encoding="utf-8"))
    text = ruff(text, target, "check", "--quiet", "--select", "I001", "--fix", "--exit-zero")
    return ruff(text, target, "format")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether files are current")
    parser.add_argument("--client-dir", type=Path, default=CLIENT)
    args = parser.parse_args(argv)
    client: Path = args.client_dir
    stale = []
    for source, target in FILES.items():
        want = generated(client, source, target)
        path = client / target
        have = path.read_text(encoding="utf-8") if path.exists() else ""
        if have == want:
            continue
        if args.check:
            stale.append(target)
        else:
            path.write_text(want, encoding="utf-8")
            print(f"wrote {path}")
    if stale:
        names = ", ".join(f"helix_dbos/client/{name}" for name in stale)
        print(f"{names} not current: run `python scripts/unasync.py`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
