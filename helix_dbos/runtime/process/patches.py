"""Named patches: how a workflow's step sequence changes without stranding runs in flight.

A run recorded by one release is replayed, after an upgrade, by the next one: every step
the new code takes must be the step the history holds at that position. So helix never
changes what a workflow checkpoints, or in which order, in place (nor does it bump the
application version for it, which strands every run in flight). Each such change is a
named patch, as `DBOS.patch_async` defines it (a marker checkpoint; a history recorded
before the patch replays the old branch), and the old branch stays until the patch is
retired (docs/upgrading.md).

A workflow checks its patches once, first thing, at its first checkpoint position: a new
run records the newest patch's marker there and takes every patch; a run that already
holds a marker takes the patches up to that one; a run recorded before any of them
takes none. The answer is an `AppliedPatches` that the workflow's code consults where it
branches. This costs nothing while a workflow has no patch, and one marker write (or, on
replay, one checkpoint read per patch newer than the run's) per run once it has some:
never a read per step.
"""

from __future__ import annotations

from dataclasses import dataclass

from dbos import DBOS


@dataclass(frozen=True)
class AppliedPatches:
    """The patches one execution of a workflow takes."""

    names: frozenset[str]

    def __contains__(self, name: object) -> bool:
        return name in self.names


NONE_APPLIED = AppliedPatches(frozenset())


@dataclass(frozen=True)
class WorkflowPatches:
    """The patches of one workflow, oldest first.

    `retired`: patches whose old branch was removed (every run recorded before them has
    ended): runs holding their marker still replay, and they count as applied."""

    workflow: str
    names: tuple[str, ...] = ()
    retired: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        every = self.retired + self.names
        if len(set(every)) != len(every):
            raise ValueError(f"{self.workflow}: a patch name is listed twice")

    async def applied(self) -> AppliedPatches:
        """Which patches this execution takes; call it before the workflow's first step."""
        if not self.names and not self.retired:
            return NONE_APPLIED
        # Newest first: the first marker found (or recorded, on a new run) decides; older
        # patches come with it, since the newer code already holds their change.
        for index in range(len(self.names) - 1, -1, -1):
            if await DBOS.patch_async(self.names[index]):
                return AppliedPatches(frozenset(self.retired + self.names[: index + 1]))
        for name in reversed(self.retired):
            await DBOS.deprecate_patch_async(name)  # consumes its marker if the run holds it
        return AppliedPatches(frozenset(self.retired))


# The patches of helix's workflows. To change what one of them checkpoints, or in which
# order: add a name here (at the end), branch on `name in patches` where the code changes,
# keep the old branch and its test, regenerate the golden step sequences, and say so in
# CHANGELOG.md. Never bump the default application version for it.
AGENT_RUN = WorkflowPatches("helix.agent_run")
SCHEDULED_FIRING = WorkflowPatches("helix.scheduled_firing")
MODEL_SLOT = WorkflowPatches("helix.llm_slot")

# Patches checked where the code branches, for a path a run rarely takes: its marker is
# written only there (`await DBOS.patch_async(name)`), never on a run's hot path.
#
# A `recv` for a human's answer that returned nothing before its deadline (a late
# notification woke it) waits again; before, every empty `recv` was a timeout.
RECV_WOKEN_EARLY = "helix.recv_woken_early"
