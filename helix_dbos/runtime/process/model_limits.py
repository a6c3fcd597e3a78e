"""Fleet-wide limits on one model's calls: a call slot taken from a DBOS queue.

An LLM call is a step inside its run's workflow, so DBOS's queue limits (which apply
to workflows dequeued from a queue, across every process on the system database)
cannot count it directly. A run whose model has limits (`LLMConfig(max_concurrent=...,
rate_limit=...)`) therefore takes a *slot* first: a small child workflow,
`helix.llm_slot`, enqueued on the model's queue (`helix-llm-<model>`) under an id
derived from the run's workflow id and step. Once DBOS dequeues it, within the
queue's concurrency and rate limits, it tells the run so and stays PENDING (so it
counts against the limit) until the run says its call is over. The queue is
partitioned by tenant: each poll visits the tenants with waiting calls in random
order, so one tenant's backlog cannot starve another's calls.

While it waits, the run's row says so (`helix.runs.queued_for`, the queue's name).
Every part is a DBOS operation of the run or of the slot, so a crash anywhere
recovers: the slot keeps its id, and a run replays what it already received.
Models without limits never come here: the agent loop checks one attribute.

A slot frees itself if its run is no longer PENDING (it ended, or went back to its queue
when its worker died: held, the slot could wait for a run that waits for a worker whose
every place is taken by runs waiting for slots). So right after a crash, a recovered run
that was granted a slot makes its call without one: the limit can be exceeded, once, by
the calls of the runs the dead worker held.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from dbos import DBOS, Queue, SetEnqueueOptions, SetWorkflowID

from helix_dbos.definitions.agent import Agent, LLMConfig
from helix_dbos.definitions.queue import DEFAULT_TENANT
from helix_dbos.errors import AgentDefinitionError
from helix_dbos.runtime.dbos import dbos_internals
from helix_dbos.runtime.process.event_loop import running_loop
from helix_dbos.runtime.process.patches import MODEL_SLOT
from helix_dbos.runtime.process.process_runtime import current_runtime
from helix_dbos.store.features import model_limits as store

logger = logging.getLogger(__name__)

MODEL_QUEUE_PREFIX = "helix-llm-"
SLOT_WORKFLOW = "helix.llm_slot"
POLL_SECONDS = 0.25  # how often a worker looks for a free slot (DBOS's default is 1 s)
WAIT_SECONDS = 300.0  # one durable wait; a run waits as many of them as it takes
CHECK_PARENT_SECONDS = 10.0  # a slot whose run is gone frees itself within this time
GRANTED = "granted"
RELEASED = "released"

_registered: dict[str, Queue] = {}


@dataclass(frozen=True)
class ModelLimits:
    """The limits of one model's queue, as DBOS takes them."""

    queue_name: str
    max_concurrent: int | None
    rate_limit: tuple[int, float] | None


def model_queue(model: str) -> str:
    """The queue of one model's call slots (`helix-llm-openai:gpt-4o`)."""
    return MODEL_QUEUE_PREFIX + re.sub(r"\s+", "_", model)


def limits_of(agents: Iterable[Agent]) -> dict[str, ModelLimits]:
    """Each limited model's limits, by queue name; two agents on one model must agree
    (one queue, one limit: the limits are the provider's quota, not an agent's)."""
    found: dict[str, ModelLimits] = {}
    for agent in agents:
        llm: LLMConfig = agent.llm
        if not llm.limited:
            continue
        limits = ModelLimits(model_queue(llm.model), llm.max_concurrent, llm.rate_limit)
        seen = found.setdefault(limits.queue_name, limits)
        if seen != limits:
            raise AgentDefinitionError(
                f"Agent '{agent.name}' sets other limits on model '{llm.model}' than another "
                f"agent does ({seen.max_concurrent}, {seen.rate_limit} vs "
                f"{limits.max_concurrent}, {limits.rate_limit}): set the same on both"
            )
    return found


def check_fallbacks(agents: Iterable[Agent]) -> None:
    """Refuse a fallback model with fleet-wide limits (`LLMConfig(fallback=...)`): a
    fallback is called inside the LLM step, where no slot can be taken, so it would be
    called past its limits. Checked against the agents given and the limited models
    registered before; `is_limited` stops such a call if one is limited later."""
    agents = list(agents)
    limited = set(_registered) | set(limits_of(agents))
    for agent in agents:
        for model in agent.llm.fallback:
            if model_queue(model) in limited:
                raise AgentDefinitionError(
                    f"Agent '{agent.name}': fallback model '{model}' has fleet-wide limits "
                    "(max_concurrent or rate_limit on an agent whose model it is); a "
                    "fallback takes no call slot, so name a model without limits"
                )


def is_limited(model: str) -> bool:
    """Whether `model` has fleet-wide limits registered in this process."""
    return model_queue(model) in _registered


async def release_for_fallback(agent: Agent, step: int) -> None:
    """Inside the LLM step, before a fallback model is called: the primary's call slot
    goes back to its queue, since the primary is called no more in this step. Not
    recorded (a step's body may send); the workflow frees the slot again after the
    step, which a slot that already returned ignores."""
    workflow_id = DBOS.workflow_id
    if not agent.llm.limited or workflow_id is None:
        return
    try:
        await DBOS.send_async(_slot_id(workflow_id, step), RELEASED, topic=_topic(RELEASED, step))
    except Exception:  # the database: the workflow frees the slot after the step anyway
        logger.warning("could not free the call slot before a fallback", exc_info=True)


def queue_names(agents: Iterable[Agent]) -> list[str]:
    """The model queues a worker serving `agents` listens to (set before launch)."""
    return sorted(limits_of(agents))


def register(agents: Iterable[Agent], *, listen: bool) -> None:
    """Persist each limited model's queue (after launch); `listen` also adds it to a
    launched worker's queues (an agent registered after launch)."""
    agents = list(agents)
    check_fallbacks(agents)
    for name, limits in limits_of(agents).items():
        # Every launch registers again: this process may have launched on another
        # database before (DBOS keeps a queue's settings in the system database).
        rate = limits.rate_limit
        limiter = None if rate is None else {"limit": rate[0], "period": rate[1]}
        # Partitioned by tenant: a partition limit as high as the queue's own, which
        # only makes DBOS visit the tenants in turn.
        _registered[name] = _register_queue(
            name,
            global_concurrency=limits.max_concurrent,
            partition_concurrency=limits.max_concurrent,
            limiter=limiter,
            partition_limiter=limiter if limits.max_concurrent is None else None,
            polling_interval_sec=POLL_SECONDS,
            on_conflict="always_update",
        )
        if listen:
            dbos_internals.listen_also(name)


def _register_queue(name: str, **settings: Any) -> Queue:
    """From sync or async code alike (as `Dispatch` registers the agents' queues)."""
    if running_loop() is None:
        return DBOS.register_queue(name, **settings)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: DBOS.register_queue(name, **settings)).result()


def _slot_id(workflow_id: str, step: int) -> str:
    return f"{workflow_id}-llm-{step}"


def _topic(what: str, step: int) -> str:
    return f"helix.llm_slot.{what}.{step}"


async def take_slot(
    agent: Agent, session_id: str, run_id: str, step: int, tenant: str | None
) -> str:
    """Inside the run's workflow: wait for a call slot of the agent's model (the run is
    `queued_for` its queue meanwhile); returns the slot's id, for `free_slot`.

    A new session's first step reads no transcript (this process seeded it, see
    `take_new_run`), so it would not see an interrupt sent while the run waited: the
    seed is dropped, and the step reads the transcript, and the interrupt, afresh."""
    workflow_id = DBOS.workflow_id
    assert workflow_id is not None, "a call slot is taken inside a run's workflow"
    name = model_queue(agent.llm.model)
    queue = _registered.get(name)
    if queue is None:
        raise RuntimeError(f"model queue {name} is not registered on this worker")
    await DBOS.run_step_async({"name": "helix.llm_queued"}, _mark_queued, run_id, name)
    slot_id = _slot_id(workflow_id, step)
    with (
        SetWorkflowID(slot_id),
        SetEnqueueOptions(queue_partition_key=tenant or DEFAULT_TENANT),
    ):
        await queue.enqueue_async(slot_workflow, workflow_id, run_id, step)
    while await DBOS.recv_async(_topic(GRANTED, step), timeout_seconds=WAIT_SECONDS) is None:
        pass  # each wait is checkpointed: a replay passes the ones already waited
    current_runtime().history.take_new_run(session_id, run_id)
    return slot_id


async def free_slot(slot_id: str, step: int) -> None:
    """The call is over (or failed): the slot goes back to the queue."""
    await DBOS.send_async(slot_id, RELEASED, topic=_topic(RELEASED, step))


@DBOS.workflow(name=SLOT_WORKFLOW)
async def slot_workflow(parent_id: str, run_id: str, step: int) -> None:
    """A dequeued slot: the run is told, and the slot holds its place in the queue's
    limits until the run frees it (or has ended without doing so)."""
    await MODEL_SLOT.applied()  # no patch yet: branch on it once there is one
    await DBOS.run_step_async({"name": "helix.llm_slot_taken"}, _mark_running, run_id)
    await DBOS.send_async(parent_id, GRANTED, topic=_topic(GRANTED, step))
    while True:
        got = await DBOS.recv_async(_topic(RELEASED, step), timeout_seconds=CHECK_PARENT_SECONDS)
        if got is not None:
            return
        status = await DBOS.get_workflow_status_async(parent_id)
        if status is None or status.status != "PENDING":
            # The run ended (cancelled, say) without freeing its slot, or it is back on
            # its queue after its worker died: were the slot held for it, the runs
            # waiting for slots could fill every worker it might resume on.
            return


async def _mark_queued(run_id: str, queue_name: str) -> None:
    await current_runtime().on_connection(
        "the run's queued mark", lambda conn: store.set_queued_for(conn, run_id, queue_name)
    )


async def _mark_running(run_id: str) -> None:
    await current_runtime().on_connection(
        "the run's queued mark", lambda conn: store.set_queued_for(conn, run_id, None)
    )
