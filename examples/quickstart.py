"""Quickstart: a durable structured-output agent with a regular tool and a finish_with tool.

    .venv/bin/python examples/quickstart.py          # the same as `helix-dbos demo`

The agent, its two tools and the scripted model are in helix_dbos/demo.py (inside the
package, so `helix-dbos demo` works from an installed wheel too); this file runs that
command. It runs on an embedded PostgreSQL (./.helix/pgdata) and prints the output, the
transcript and the usage, read back with SQL. Set ANTHROPIC_API_KEY or OPENAI_API_KEY
(or HELIX_MODEL=provider:model) to run the same agent on a real model.
"""

from __future__ import annotations

import subprocess
import sys

if __name__ == "__main__":
    demo = [sys.executable, "-m", "helix_dbos.cli", "demo", *sys.argv[1:]]
    raise SystemExit(subprocess.call(demo))
