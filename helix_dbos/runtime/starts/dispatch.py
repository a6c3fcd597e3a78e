"""Where a run executes: started in this process, or enqueued for a worker.

A process that serves agents starts their runs itself (the fast path: no queue poll)
unless the run asked for a priority or its agent belongs to a `RunQueue` with limits.
A process that executes no runs (`executes_runs=False`, a web front) always enqueues.
Each agent's own queue is listened to only by workers that serve the agent, so a
queued or recovered run never reaches a process without its code.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dbos import DBOS, Queue, SetEnqueueOptions, SetWorkflowID

from helix_dbos.definitions.agent import Agent
from helix_dbos.definitions.queue import RateLimit, RunQueue, agent_queue
from helix_dbos.errors import AgentDefinitionError, InvalidInputError
from helix_dbos.runtime.dbos import dbos_internals
from helix_dbos.runtime.loop.agent_loop import agent_run_workflow
from helix_dbos.runtime.process.event_loop import running_loop
from helix_dbos.runtime.steps.step_types import RunOptions
from helix_dbos.runtime.steps.workflow_start import start_workflow

MAX_PRIORITY = 2**31 - 1  # DBOS's range: 1 (first) to 2**31-1


def check_priority(priority: int | None) -> None:
    """Refuse a priority DBOS would reject, before the run is opened."""
    if priority is not None and not 1 <= priority <= MAX_PRIORITY:
        raise InvalidInputError(f"priority must be between 1 and {MAX_PRIORITY}, not {priority}")


def _register_queue(name: str, **settings: Any) -> Queue:
    """`DBOS.register_queue` from sync or async code alike: `launch()` and `register()`
    are sync calls that an async app makes on its loop, where DBOS refuses the sync
    variant; a short thread of its own keeps both callers simple."""
    if running_loop() is None:
        return DBOS.register_queue(name, **settings)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: DBOS.register_queue(name, **settings)).result()


def _limiter(limit: RateLimit | None) -> dbos_internals.QueueRateLimit | None:
    return None if limit is None else {"limit": limit.limit, "period": limit.period_seconds}


class Dispatch:
    """The queue settings of one HelixDBOS, and the start or enqueue of each run."""

    def __init__(
        self, queues: Sequence[RunQueue], *, executes_runs: bool, listen_queues: Iterable[str]
    ) -> None:
        self.queues = list(queues)
        self.executes_runs = executes_runs
        self.extra_listen = list(listen_queues)
        self._queue_of: dict[str, RunQueue] = {}
        for queue in self.queues:
            for name in queue.agent_names:
                if name in self._queue_of:
                    raise AgentDefinitionError(
                        f"Agent '{name}' is in two run queues: "
                        f"'{self._queue_of[name].name}' and '{queue.name}'"
                    )
                self._queue_of[name] = queue
        self._registered: dict[str, Queue] = {}

    def check_agents(self, agents: Iterable[str]) -> None:
        """Every agent a queue names must be registered: a typo would leave its runs on
        a queue nobody listens to."""
        known = set(agents)
        for queue in self.queues:
            missing = [a for a in queue.agent_names if a not in known]
            if missing:
                raise AgentDefinitionError(
                    f"RunQueue '{queue.name}' names unregistered agent(s): {', '.join(missing)}"
                )

    def listen_list(self, served: Iterable[str]) -> list[str]:
        """The queues a worker serving `served` dequeues from (set before launch)."""
        mine = set(served)
        own = [agent_queue(name) for name in sorted(mine)]
        shared = [q.name for q in self.queues if set(q.agent_names) <= mine]
        return own + shared + self.extra_listen

    def register(self, agent_names: Iterable[str]) -> None:
        """Persist every queue's settings (after launch: DBOS keeps them in its tables)."""
        for name in agent_names:
            self.register_agent(name)
        for queue in self.queues:
            self._registered[queue.name] = _register_queue(
                queue.name,
                global_concurrency=queue.concurrency,
                worker_concurrency=queue.worker_concurrency,
                limiter=_limiter(queue.rate_limit),
                partition_concurrency=queue.per_partition_concurrency,
                partition_limiter=_limiter(queue.per_partition_rate_limit),
            )

    def register_agent(self, name: str) -> None:
        """An agent's own queue (where its recovered runs go); listened to if served here."""
        queue_name = agent_queue(name)
        if queue_name not in self._registered:
            self._registered[queue_name] = _register_queue(queue_name, on_conflict="never_update")
        if self.executes_runs:
            dbos_internals.listen_also(queue_name)

    def starts_here(self, agent: Agent, priority: int | None) -> bool:
        """Whether `start` runs the workflow in this process rather than enqueueing it."""
        return agent.name not in self._queue_of and self.executes_runs and priority is None

    async def start(
        self,
        workflow_id: str,
        run_id: str,
        session_id: str,
        agent: Agent,
        options: RunOptions,
        priority: int | None,
    ) -> asyncio.Future[Any] | None:
        """Start the run's workflow here (returns its task), or enqueue it under its
        workflow id (returns None)."""
        shared = self._queue_of.get(agent.name)
        if self.starts_here(agent, priority):
            handle = await start_workflow(
                agent_run_workflow, workflow_id, run_id, session_id, agent.name, options
            )
            return dbos_internals.local_task(handle)
        queue_name = shared.name if shared is not None else agent_queue(agent.name)
        queue = self._registered.get(queue_name) or DBOS.retrieve_queue(queue_name)
        if queue is None:
            raise RuntimeError(f"queue {queue_name} is not registered: call helix.launch()")
        partition = (
            shared.partition_key(agent.llm.model, options.tenant) if shared is not None else None
        )
        with (
            SetWorkflowID(workflow_id),
            SetEnqueueOptions(priority=priority, queue_partition_key=partition),
        ):
            await queue.enqueue_async(agent_run_workflow, run_id, session_id, agent.name, options)
        return None
