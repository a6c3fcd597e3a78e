"""`HelixDBOS` is a thin facade: its constructor touches no database, every public async
method has a `_sync` twin (the rule its docstring states), and one module owns opening
a run and the run id -> workflow id mapping."""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

import forkserver

from helix_dbos import HelixDBOS, PendingToolCall, UsageSummary
from helix_dbos.facade.time_travel_methods import Checkpoints
from helix_dbos.runtime.sessions.run_opening import child_ids, run_id_of, workflow_id
from helix_dbos.schedules.methods import Schedules

REPO = Path(__file__).resolve().parent.parent
# Public async methods without a twin, and why: an async iterator has no sync form, and
# `shutdown_async` is itself the async twin of `shutdown`.
NO_TWIN = {"stream", "shutdown_async"}


def missing_twins(cls: type) -> list[str]:
    """Public coroutine methods of `cls` without a `<name>_sync` of the same signature."""
    missing = []
    for name, member in inspect.getmembers(cls, inspect.iscoroutinefunction):
        if name.startswith("_") or name in NO_TWIN:
            continue
        twin = getattr(cls, f"{name}_sync", None)
        if twin is None or inspect.signature(twin) != inspect.signature(member):
            missing.append(name)
    return missing


def test_every_public_async_method_has_a_sync_twin():
    assert missing_twins(HelixDBOS) == []
    assert "_sync" in (HelixDBOS.__doc__ or ""), "the class docstring states the rule"


def test_the_twin_check_sees_a_missing_twin():
    class Facade:
        async def read(self, key: str) -> str:
            return key

        async def write(self, key: str) -> None: ...

        def read_sync(self, key: str) -> str:
            return key

        def write_sync(self, other: int) -> None: ...

    assert missing_twins(Facade) == ["write"]

    class Mixin:  # a facade's methods may come from mixins: the check sees them too
        async def fork(self, key: str) -> str:
            return key

    class Mixed(Mixin):
        async def own(self) -> None: ...

        def own_sync(self) -> None: ...

    assert missing_twins(Mixed) == ["fork"]


def test_the_mixins_methods_are_the_facades():
    """The answers and reads come from mixins, through the class; schedules and time
    travel are sub-APIs with twins of their own; memory is a property."""
    for name in ("approve", "get_usage"):
        assert inspect.iscoroutinefunction(getattr(HelixDBOS, name)), name
        assert callable(getattr(HelixDBOS, f"{name}_sync")), name
    assert missing_twins(Schedules) == [] and missing_twins(Checkpoints) == []
    assert inspect.iscoroutinefunction(Schedules.create) and callable(Schedules.create_sync)
    assert inspect.iscoroutinefunction(Checkpoints.fork) and callable(Checkpoints.prune_sync)
    assert isinstance(HelixDBOS.memory, property) and callable(HelixDBOS.use_memory)


def test_typed_answers_of_the_public_methods():
    hints = {
        name: inspect.signature(getattr(HelixDBOS, name)).return_annotation
        for name in ("pending_tool_calls", "get_usage", "pending_tool_calls_sync", "get_usage_sync")
    }
    assert hints["pending_tool_calls"] == "list[PendingToolCall]"
    assert hints["get_usage"] == "UsageSummary"
    assert UsageSummary().llm_calls == 0 and "depth" in PendingToolCall.model_fields


_CONSTRUCT = """
import sys
import psycopg
from helix_dbos import Agent, HelixDBOS

url = sys.argv[1]

def schemas():
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname IN ('helix', 'dbos')"
        ).fetchall()
    return sorted(r[0] for r in rows)

helix = HelixDBOS([Agent("quiet")], database_url=url)
print("after constructor", schemas())
helix.migrate()
print("after migrate", schemas())
with psycopg.connect(url) as conn:
    tables = conn.execute(
        "SELECT table_schema || '.' || table_name FROM information_schema.tables "
        "WHERE table_name IN ('runs', 'workflow_status', 'datasource_outputs') "
        "ORDER BY 1"
    ).fetchall()
print("tables", [t[0] for t in tables])
HelixDBOS([Agent("unreachable")], database_url="postgresql://x@127.0.0.1:9/none")
print("constructed on an unreachable server")
"""


def test_the_constructor_touches_no_database_and_migrate_does(empty_database_url: str):
    """Constructed at module level (an app, the CLI's --app), HelixDBOS creates nothing
    and connects nowhere: on an empty database no schema appears until `migrate()`
    (which `launch()` calls first), and a server nobody listens on is no error."""
    done = forkserver.run(
        [sys.executable, "-c", _CONSTRUCT, empty_database_url],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "after constructor []"
    assert lines[1] == "after migrate ['dbos', 'helix']"
    assert "'helix.runs'" in lines[2] and "'dbos.workflow_status'" in lines[2]
    assert "'dbos.datasource_outputs'" in lines[2], "the datasource's checkpoint table"
    assert lines[3] == "constructed on an unreachable server"


def test_one_module_maps_run_ids_to_workflow_ids():
    assert workflow_id("run_1") == "helix-run_1"
    assert run_id_of(workflow_id("run_1")) == "run_1"
    assert run_id_of("orders-42") is None
    # A replay derives the same child; another call or step another one.
    assert child_ids("run_p", 3, "c1") == child_ids("run_p", 3, "c1")
    assert child_ids("run_p", 3, "c1") != child_ids("run_p", 4, "c1")
    session_id, run_id = child_ids("run_p", 3, "c1")
    assert session_id.startswith("ses_") and run_id.startswith("run_")


def test_the_workflow_id_is_spelled_in_one_module():
    spelled = re.compile(r"""["']helix-\{|["']helix-["']""")
    places = [
        str(path.relative_to(REPO))
        for path in sorted((REPO / "helix_dbos").rglob("*.py"))
        if spelled.search(path.read_text())
    ]
    assert places == ["helix_dbos/runtime/sessions/run_opening.py"], "use run_opening.workflow_id()"
