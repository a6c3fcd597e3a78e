"""Memory ids keyed by the DBOS step that saves them, so a step that runs again after
a crash (its rows committed, its checkpoint not) finds its first life's row instead of
inserting a second one (issue 46)."""

from __future__ import annotations

import hashlib
import uuid
from collections import OrderedDict

from dbos import DBOS

# Steps whose saves are being counted; an old step's count is dropped past this many.
_TRACKED_STEPS = 4096


class StepMemoryIds:
    """The id of each memory a step saves: derived from (workflow id, step id, the
    save's ordinal within this attempt of the step), a random one outside DBOS. A tool
    or hook step that saves several memories numbers them; a re-run (after a crash, or
    a retry's next attempt) numbers from 0 again and meets the same ids."""

    def __init__(self) -> None:
        self._counts: OrderedDict[tuple[str, int, int], int] = OrderedDict()

    def next_id(self) -> str:
        workflow_id, status = DBOS.workflow_id, DBOS.step_status
        if workflow_id is None or status is None:
            return f"mem_{uuid.uuid4().hex}"
        step = (workflow_id, status.step_id, status.current_attempt or 0)
        ordinal = self._counts.pop(step, 0)
        self._counts[step] = ordinal + 1
        while len(self._counts) > _TRACKED_STEPS:
            self._counts.popitem(last=False)
        return step_memory_id(workflow_id, status.step_id, ordinal)


def step_memory_id(workflow_id: str, step_id: int, ordinal: int) -> str:
    digest = hashlib.sha256(f"helix.memory:{workflow_id}:{step_id}:{ordinal}".encode())
    return f"mem_{digest.hexdigest()[:32]}"


# One for the process: two managers saving in one step must not both number from 0.
step_memory_ids = StepMemoryIds()
