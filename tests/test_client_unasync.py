"""The sync client is made from the async one (scripts/unasync.py) and must be current,
and the client package stays light: httpx and pydantic, no server, DBOS or database."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import forkserver
import pytest

from helix_dbos.api.models import StatusResponse
from helix_dbos.client import AsyncHelixClient, HelixClient
from helix_dbos.server import models as old_models

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "unasync.py"


def test_the_sync_client_is_generated_from_the_async_one_and_current():
    done = forkserver.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, cwd=REPO
    )
    assert done.returncode == 0, (
        f"{done.stderr.strip()}\nthe sync client is stale: run `python scripts/unasync.py`"
    )


def test_the_check_fails_on_a_stale_sync_file_and_the_script_mends_it(tmp_path):
    """On a copy of the client folder: a hand edit to sync.py, and a change to aio.py."""
    client = REPO / "helix_dbos" / "client"
    for name in ("aio.py", "aio_schedules.py", "sync.py", "sync_schedules.py"):
        shutil.copy(client / name, tmp_path / name)
    edited = tmp_path / "sync.py"
    edited.write_text(edited.read_text(encoding="utf-8") + "# edited by hand\n", encoding="utf-8")
    source = tmp_path / "aio_schedules.py"
    source.write_text(
        source.read_text(encoding="utf-8").replace("at every firing", "at each firing"),
        encoding="utf-8",
    )

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, str(SCRIPT), "--client-dir", str(tmp_path), *args]
        return forkserver.run(command, capture_output=True, text=True, cwd=REPO)

    stale = run("--check")
    assert stale.returncode == 1, stale.stderr
    assert "sync.py, helix_dbos/client/sync_schedules.py not current" in stale.stderr
    assert "run `python scripts/unasync.py`" in stale.stderr
    assert run().returncode == 0
    assert run("--check").returncode == 0
    assert edited.read_text(encoding="utf-8") == (client / "sync.py").read_text(encoding="utf-8")
    assert "at each firing" in (tmp_path / "sync_schedules.py").read_text(encoding="utf-8")


def test_the_sync_client_has_every_public_method_of_the_async_one():
    def public(kind: type) -> set[str]:
        return {name for name in dir(kind) if not name.startswith("_")}

    renamed = {"aclose": "close"}
    assert {renamed.get(name, name) for name in public(AsyncHelixClient)} == public(HelixClient)


def test_importing_the_client_loads_httpx_and_pydantic_only():
    """A fresh interpreter: the clients pull in no server or DBOS side. (`import
    helix_dbos.client` alone loads its error classes: the clients load on first use.)"""
    program = (
        "import sys\n"
        "from helix_dbos.client import AsyncHelixClient, HelixClient\n"
        "roots = {name.split('.')[0] for name in sys.modules}\n"
        "helix = sorted(n for n in sys.modules if n.startswith('helix_dbos.'))\n"
        "print(' '.join(sorted(roots)))\n"
        "print(' '.join(helix))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True
    )
    roots_line, helix_line = done.stdout.splitlines()
    roots = set(roots_line.split())
    assert {"httpx", "pydantic"} <= roots
    heavy = {"dbos", "sqlalchemy", "fastapi", "starlette", "psycopg", "uvicorn", "anyio_dbos"}
    assert not roots & heavy, sorted(roots & heavy)
    # the wire models, and the pure types they are made of (test_architecture.py)
    light = ("helix_dbos.client", "helix_dbos.api", "helix_dbos.orchestration")
    others = set(helix_line.split()) - {"helix_dbos", "helix_dbos.errors"}
    # the package's __init__ installs these stdlib-only leaves (docs/internals.md)
    others -= {"helix_dbos.moved_modules", "helix_dbos.named_tools", "helix_dbos.lazy_names"}
    others -= {"helix_dbos.streaming", "helix_dbos.streaming.chunks"}
    assert {"helix_dbos.api.models", "helix_dbos.client.sync"} <= others
    assert not [name for name in others if not name.startswith(light)], sorted(others)


def test_the_old_home_of_the_http_models_still_answers_and_warns():
    with pytest.warns(DeprecationWarning, match="import StatusResponse from helix_dbos.api"):
        assert old_models.StatusResponse is StatusResponse
    with pytest.raises(AttributeError):
        old_models.NoSuchModel  # noqa: B018
