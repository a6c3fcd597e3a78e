"""Where runs wait for a worker: DBOS queues, as deployment settings beside the agents.

Every agent has a queue of its own (`helix.agent.<name>`), listened to only by workers
that serve the agent, so a run never lands on a process that lacks its code. A
`RunQueue` groups agents whose runs share limits: a fleet-wide concurrency, a
per-worker concurrency, a start rate (say, an API key's requests per minute), and
limits per model or per provider, which become a partitioned DBOS queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from helix_dbos.errors import AgentDefinitionError

if TYPE_CHECKING:
    from helix_dbos.definitions.agent import Agent

AGENT_QUEUE_PREFIX = "helix.agent."
PartitionBy = Literal["model", "provider", "tenant"]
DEFAULT_TENANT = "default"  # the partition of a run started without a tenant


def agent_queue(agent_name: str) -> str:
    """The queue of one agent's runs (the one a dead worker's runs are handed back to)."""
    return AGENT_QUEUE_PREFIX + agent_name


@dataclass(frozen=True)
class RateLimit:
    """At most `limit` runs start within any rolling window of `period_seconds`."""

    limit: int
    period_seconds: float

    def __post_init__(self) -> None:
        if self.limit < 1 or self.period_seconds <= 0:
            raise AgentDefinitionError(
                f"RateLimit needs limit >= 1 and period_seconds > 0, not {self.limit}/"
                f"{self.period_seconds}"
            )


@dataclass(frozen=True)
class RunQueue:
    """A DBOS queue shared by the runs of `agents`.

    `concurrency` counts runs executing at once across the fleet, `worker_concurrency`
    on one worker; `rate_limit` caps how many runs start per period. With `partition_by`
    ("model" or "provider"), `per_partition_concurrency` and `per_partition_rate_limit`
    apply to each model (or provider) separately: one queue, one limit per API quota.
    With `partition_by="tenant"` they apply to each tenant (`execute(..., tenant=...)`),
    and DBOS visits the tenants in turn: one tenant's burst cannot starve another.
    A worker listens to the queue only if it serves every one of its agents.
    """

    name: str
    agents: Sequence[Agent | str]
    concurrency: int | None = None
    worker_concurrency: int | None = None
    rate_limit: RateLimit | None = None
    partition_by: PartitionBy | None = None
    per_partition_concurrency: int | None = None
    per_partition_rate_limit: RateLimit | None = None

    def __post_init__(self) -> None:
        name = self.name
        if not name or name.startswith(AGENT_QUEUE_PREFIX):
            raise AgentDefinitionError(
                f"RunQueue name {name!r} must be non-empty and not start with "
                f"{AGENT_QUEUE_PREFIX!r} (helix's per-agent queues)"
            )
        if not self.agents:
            raise AgentDefinitionError(f"RunQueue {name!r} names no agent")
        for value, label in (
            (self.concurrency, "concurrency"),
            (self.worker_concurrency, "worker_concurrency"),
            (self.per_partition_concurrency, "per_partition_concurrency"),
        ):
            if value is not None and value < 1:
                raise AgentDefinitionError(f"RunQueue {name!r}: {label} must be at least 1")
        partitioned = (
            self.per_partition_concurrency is not None or self.per_partition_rate_limit is not None
        )
        if partitioned != (self.partition_by is not None):
            raise AgentDefinitionError(
                f"RunQueue {name!r}: partition_by and the per_partition_* limits go together"
            )

    @property
    def agent_names(self) -> tuple[str, ...]:
        return tuple(a if isinstance(a, str) else a.name for a in self.agents)

    def partition_key(self, model: str, tenant: str | None = None) -> str | None:
        """The partition a run of an agent on `model` (`provider:name`), for `tenant`,
        goes to."""
        if self.partition_by is None:
            return None
        if self.partition_by == "tenant":
            return tenant or DEFAULT_TENANT
        return model.partition(":")[0] if self.partition_by == "provider" else model
