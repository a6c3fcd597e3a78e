"""Named patches (`runtime/process/patches.py`) on real DBOS: a run recorded before a patch replays
its old branch after the upgrade, a new run takes the patch, and a retired patch's marker
still replays.

A replay here is DBOS's own: the waiting workflow is cancelled and resumed, which runs
its code again from the start against its recorded steps (what recovery does after a
crash or an upgrade), in this process.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from dbos import DBOS

from helix_dbos import HelixDBOS
from helix_dbos.runtime.process import patches as patches_module
from helix_dbos.runtime.process.event_loop import on_target_loop
from helix_dbos.runtime.process.patches import (
    AGENT_RUN,
    MODEL_SLOT,
    SCHEDULED_FIRING,
    WorkflowPatches,
)

WORKFLOW = "test.patched_workflow"
# The code "released" at any moment of a test: the test swaps it to upgrade.
released = {"patches": WorkflowPatches(WORKFLOW)}
ran: list[tuple[str, str]] = []  # (workflow id, step body) each time a step body runs


def _body(name: str) -> str:
    ran.append((DBOS.workflow_id or "", name))
    return name


@DBOS.workflow(name=WORKFLOW)
async def patched_workflow() -> dict[str, Any]:
    applied = await released["patches"].applied()
    steps = [await DBOS.run_step_async({"name": "first"}, _body, "first")]
    if "p1" in applied:
        steps.append(await DBOS.run_step_async({"name": "new"}, _body, "new"))
    else:
        steps.append(await DBOS.run_step_async({"name": "old"}, _body, "old"))
    await DBOS.recv_async("go", timeout_seconds=60)
    steps.append(await DBOS.run_step_async({"name": "last"}, _body, "last"))
    return {"applied": sorted(applied.names), "steps": steps}


async def _start() -> str:
    workflow_id = f"patched-{uuid.uuid4().hex[:10]}"

    async def start() -> None:
        from dbos import SetWorkflowID  # noqa: PLC0415

        with SetWorkflowID(workflow_id):
            await DBOS.start_workflow_async(patched_workflow)

    await on_target_loop(start)
    await _until_waiting(workflow_id)
    return workflow_id


async def _until_waiting(workflow_id: str) -> None:
    """Until the workflow has recorded its step before the `recv` (then it waits)."""
    for _ in range(200):
        steps = await on_target_loop(lambda: DBOS.list_workflow_steps_async(workflow_id))
        if any(s["function_name"] == "old" or s["function_name"] == "new" for s in steps):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{workflow_id} never reached its wait")


async def _replay_and_finish(workflow_id: str) -> dict[str, Any]:
    """Cancel the waiting execution, resume it (a replay from the first step on the code
    released now), and let it finish."""
    await on_target_loop(lambda: DBOS.cancel_workflow_async(workflow_id))
    await on_target_loop(lambda: DBOS.resume_workflow_async(workflow_id))
    await _until_waiting(workflow_id)
    await on_target_loop(lambda: DBOS.send_async(workflow_id, "now", "go"))
    handle = await on_target_loop(lambda: DBOS.retrieve_workflow_async(workflow_id))
    result: dict[str, Any] = await asyncio.wait_for(on_target_loop(handle.get_result), 60)
    return result


async def _names(workflow_id: str) -> list[str]:
    """The recorded steps' names, the `recv`'s timer (`DBOS.sleep`) left out."""
    steps = await on_target_loop(lambda: DBOS.list_workflow_steps_async(workflow_id))
    return [s["function_name"] for s in steps if s["function_name"] != "DBOS.sleep"]


@pytest.fixture(autouse=True)
def _fresh_release(helix: HelixDBOS) -> Any:
    released["patches"] = WorkflowPatches(WORKFLOW)
    ran.clear()
    yield
    released["patches"] = WorkflowPatches(WORKFLOW)


async def test_a_run_recorded_before_a_patch_replays_its_old_branch() -> None:
    old_run = await _start()  # recorded by the release without the patch
    released["patches"] = WorkflowPatches(WORKFLOW, ("p1",))  # the upgrade
    result = await _replay_and_finish(old_run)
    assert result == {"applied": [], "steps": ["first", "old", "last"]}
    assert await _names(old_run) == ["first", "old", "DBOS.recv", "last"]
    # Replayed, not run again: each recorded body ran once.
    assert [name for wid, name in ran if wid == old_run] == ["first", "old", "last"]


async def test_a_new_run_records_the_newest_marker_and_takes_every_patch() -> None:
    released["patches"] = WorkflowPatches(WORKFLOW, ("p0", "p1"))
    run = await _start()
    result = await _replay_and_finish(run)  # its own replay keeps the patched branch
    assert result == {"applied": ["p0", "p1"], "steps": ["first", "new", "last"]}
    assert await _names(run) == ["DBOS.patch-p1", "first", "new", "DBOS.recv", "last"]
    assert [name for wid, name in ran if wid == run] == ["first", "new", "last"]


async def test_a_run_of_an_older_patch_keeps_it_after_a_newer_one_lands() -> None:
    released["patches"] = WorkflowPatches(WORKFLOW, ("p1",))
    run = await _start()
    released["patches"] = WorkflowPatches(WORKFLOW, ("p1", "p2"))
    result = await _replay_and_finish(run)
    assert result["applied"] == ["p1"]  # not p2: its history predates it
    assert await _names(run) == ["DBOS.patch-p1", "first", "new", "DBOS.recv", "last"]


async def test_a_retired_patch_still_replays_the_runs_that_hold_its_marker() -> None:
    released["patches"] = WorkflowPatches(WORKFLOW, ("p1",))
    run = await _start()
    # p1's old branch is gone; p2 is the newest patch.
    released["patches"] = WorkflowPatches(WORKFLOW, ("p2",), retired=("p1",))
    result = await _replay_and_finish(run)
    assert result == {"applied": ["p1"], "steps": ["first", "new", "last"]}
    fresh = await _start()
    assert (await _replay_and_finish(fresh))["applied"] == ["p1", "p2"]
    assert await _names(fresh) == ["DBOS.patch-p2", "first", "new", "DBOS.recv", "last"]


async def test_no_patch_costs_no_checkpoint() -> None:
    run = await _start()
    result = await _replay_and_finish(run)
    assert result == {"applied": [], "steps": ["first", "old", "last"]}
    assert not [n for n in await _names(run) if n.startswith("DBOS.patch-")]


def test_a_patch_name_is_listed_once() -> None:
    with pytest.raises(ValueError, match="listed twice"):
        WorkflowPatches(WORKFLOW, ("p1", "p2"), retired=("p1",))


def test_helix_workflows_declare_their_patches() -> None:
    """Every helix workflow checks its patches; the names are unique across them."""
    declared = [AGENT_RUN, SCHEDULED_FIRING, MODEL_SLOT]
    assert {p.workflow for p in declared} == {
        "helix.agent_run",
        "helix.scheduled_firing",
        "helix.llm_slot",
    }
    assert {
        name
        for name in dir(patches_module)
        if isinstance(getattr(patches_module, name), WorkflowPatches)
    } == {"AGENT_RUN", "SCHEDULED_FIRING", "MODEL_SLOT"}


def test_the_default_application_version_never_moves() -> None:
    """DBOS recovers a run only in a process of its version: moving the default strands
    every run in flight. Change a workflow's steps behind a patch instead."""
    from helix_dbos.runtime.worker_process import DEFAULT_APP_VERSION  # noqa: PLC0415

    assert DEFAULT_APP_VERSION == "helix-6", (
        "Do not bump the default application version: put the change behind a named patch "
        "(helix_dbos/runtime/process/patches.py, docs/upgrading.md)"
    )
