"""The `helix-dbos` command, on typer and rich: one module per command group.

- `database`: migrate, db-url, db stop / status   - `running`: demo, resume (run agents here)
- `fleet`: serve, worker, workers, recover          - `reads`: runs, transcript, usage (SQL only)
- `answers`: approve, deny, submit, interrupt, abort (SQL checks, sent with DBOSClient)
- `doctor`: what a first run needs, and what to fix

Only `serve`, `worker`, `resume` and `demo` run agents, so only they need `--app`.
"""

from helix_dbos.cli.main import app, main

__all__ = ["app", "main"]
