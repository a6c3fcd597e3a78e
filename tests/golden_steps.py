"""Golden step sequences: what each helix workflow checkpoints, in order, read from DBOS's
`dbos.operation_outputs`, compared with a fixture in tests/golden/.

A run in flight is replayed after an upgrade: the new code must take, at each position,
the step the old code recorded there. So a change to a recorded sequence is a change to
a contract with every run in flight, and it fails here until it is put behind a named
patch (helix_dbos/runtime/process/patches.py, docs/upgrading.md) and the fixture regenerated.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from helpers import sql

GOLDEN_DIR = Path(__file__).with_name("golden")
UPDATE_ENV = "HELIX_UPDATE_GOLDEN"


@dataclass(frozen=True)
class RecordedWorkflow:
    """One workflow of a scenario: where it sits in the tree, its registered name and the
    names of its recorded operations in checkpoint order."""

    label: str
    workflow: str
    steps: list[str]


def _normalise(name: str, names: dict[str, str]) -> str:
    """Ids and per-test names replaced by the roles the scenario gave them."""
    for actual, role in sorted(names.items(), key=lambda item: -len(item[0])):
        name = name.replace(actual, f"<{role}>")
    return name


def _children(database_url: str, workflow_id: str) -> list[str]:
    """The workflows this one started: those it recorded as operations (in their order),
    then any other whose parent it is (by start time)."""
    recorded = [
        row[0]
        for row in sql(
            database_url,
            "SELECT child_workflow_id FROM dbos.operation_outputs WHERE workflow_uuid = %s "
            "AND child_workflow_id IS NOT NULL ORDER BY function_id",
            workflow_id,
        )
    ]
    others = [
        row[0]
        for row in sql(
            database_url,
            "SELECT workflow_uuid FROM dbos.workflow_status WHERE parent_workflow_id = %s "
            "ORDER BY created_at, workflow_uuid",
            workflow_id,
        )
        if row[0] not in recorded
    ]
    return list(dict.fromkeys(recorded + others))


def _tree(database_url: str, roots: dict[str, str]) -> list[tuple[str, str]]:
    """(label, workflow id) of every workflow under the labelled roots, depth first."""
    found: list[tuple[str, str]] = []

    def visit(label: str, workflow_id: str) -> None:
        if any(seen == workflow_id for _, seen in found):
            return
        found.append((label, workflow_id))
        for index, child in enumerate(_children(database_url, workflow_id), start=1):
            visit(f"{label}/{index}", child)

    for label, workflow_id in roots.items():
        visit(label, workflow_id)
    return found


def _pending(database_url: str, workflow_ids: list[str]) -> list[str]:
    return [
        row[0]
        for row in sql(
            database_url,
            "SELECT workflow_uuid FROM dbos.workflow_status WHERE workflow_uuid = ANY(%s) "
            "AND status IN ('PENDING', 'ENQUEUED')",
            workflow_ids,
        )
    ]


async def record(
    database_url: str, roots: dict[str, str], names: dict[str, str], timeout: float = 60.0
) -> list[RecordedWorkflow]:
    """The recorded sequences of every workflow under `roots` (label -> workflow id), once
    each has ended (its last operations are recorded after its run's row ends)."""
    deadline = time.monotonic() + timeout
    while True:
        tree = _tree(database_url, roots)
        if not _pending(database_url, [wid for _, wid in tree]):
            break
        assert time.monotonic() < deadline, f"workflows still running: {tree}"
        await asyncio.sleep(0.05)
    recorded = []
    for label, workflow_id in tree:
        [(workflow,)] = sql(
            database_url,
            "SELECT name FROM dbos.workflow_status WHERE workflow_uuid = %s",
            workflow_id,
        )
        steps = sql(
            database_url,
            "SELECT function_name FROM dbos.operation_outputs WHERE workflow_uuid = %s "
            "ORDER BY function_id",
            workflow_id,
        )
        recorded.append(RecordedWorkflow(label, workflow, [_normalise(s[0], names) for s in steps]))
    return recorded


def mismatch_message(scenario: str, path: Path, expected: object, actual: object) -> str:
    return (
        f"The step sequence of scenario '{scenario}' changed: runs in flight recorded the old "
        f"one and a replay after an upgrade would break them.\n"
        f"  Put the change behind a named patch (helix_dbos/runtime/process/patches.py, "
        f"DBOS.patch_async; see docs/upgrading.md), keep the old branch and its test, then "
        f"regenerate the fixtures with {UPDATE_ENV}=1 pytest tests/test_golden_steps.py.\n"
        f"  fixture {path}:\n{json.dumps(expected, indent=1)}\n"
        f"  recorded now:\n{json.dumps(actual, indent=1)}"
    )


def check(scenario: str, recorded: list[RecordedWorkflow]) -> None:
    """Compare with tests/golden/<scenario>.json, or write it under HELIX_UPDATE_GOLDEN=1."""
    path = GOLDEN_DIR / f"{scenario}.json"
    actual = {"scenario": scenario, "workflows": [asdict(w) for w in recorded]}
    if os.environ.get(UPDATE_ENV) == "1":
        GOLDEN_DIR.mkdir(exist_ok=True)
        path.write_text(json.dumps(actual, indent=2) + "\n")
        return
    assert path.exists(), (
        f"No golden step sequence for scenario '{scenario}' ({path}): record it with "
        f"{UPDATE_ENV}=1 pytest tests/test_golden_steps.py"
    )
    expected = json.loads(path.read_text())
    assert expected == actual, mismatch_message(scenario, path, expected, actual)
