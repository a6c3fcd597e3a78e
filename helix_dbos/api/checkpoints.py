"""Time travel's checkpoints as the API shows them (docs/time-travel.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from helix_dbos.api.runs import UsageSummary
from helix_dbos.orchestration.types import Message


class Checkpoint(BaseModel):
    """A session as it stood after one committed step (`kind="step"`), after a step's
    head written ahead of the step (`"head"`: before a wait for a human, or while a slow
    tool runs; its last message is the model's, with the pending calls), or at the start
    of a fork (`"fork"`). `message_seq` is the last message it covers;
    `usage` is the session's usage so far."""

    checkpoint_id: str
    session_id: str
    run_id: str | None
    step: int
    kind: str
    message_seq: int
    state: dict[str, Any]
    usage: UsageSummary
    created_at: datetime


class CheckpointView(BaseModel):
    """A checkpoint with the transcript as it was then."""

    checkpoint: Checkpoint
    messages: list[Message]

    @property
    def state(self) -> dict[str, Any]:
        return self.checkpoint.state
