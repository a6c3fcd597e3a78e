"""What every benchmark script shares: JSON-friendly rounding, CPU time, percentiles,
and an optional pyinstrument profile of one phase."""

from __future__ import annotations

import os
import resource
import statistics
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from helix_dbos import Agent, HelixDBOS
from helix_dbos.llm.base import LLMAdapter


def rounded(value: Any) -> Any:
    """Floats to 3 decimals, through nested dicts, for the one JSON line each prints."""
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    return value


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def thread_cpu_seconds() -> dict[str, float]:
    """CPU seconds so far of each of this process's threads, by thread name (Python's
    name where the thread is Python's, else the kernel's; a name shared by several
    threads sums them), from /proc/self/task (Linux)."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    ticks = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/self/task/{tid}/comm") as f:
                comm = f.read().strip()
        except OSError:  # the thread ended meanwhile
            continue
        name = names.get(int(tid), comm)
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / ticks
    return out


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


def spread(values: list[float], unit: str) -> dict[str, float]:
    """The median, p10 and p90 of timings, rounded, keyed with their unit (`median_ms`)."""
    return {
        f"median_{unit}": round(statistics.median(values), 2),
        f"p10_{unit}": round(percentile(values, 10), 2),
        f"p90_{unit}": round(percentile(values, 90), 2),
    }


@contextmanager
def profiled(prefix: str | None, phase: str) -> Iterator[None]:
    """With --pyinstrument PREFIX: sample the event-loop thread during `phase` into
    PREFIX-phase.txt (async_mode off: every task's time, where the loop thread spends it).
    Other threads (uvicorn's, DBOS's executor) are not sampled."""
    if not prefix:
        yield
        return
    from pyinstrument import Profiler  # noqa: PLC0415 - optional: only with --pyinstrument

    profiler = Profiler(interval=0.001, async_mode="disabled")
    with profiler:
        yield
    path = Path(f"{prefix}-{phase}.txt")
    path.write_text(profiler.output_text(unicode=False, color=False))
    print(f"pyinstrument profile of {phase}: {path}", flush=True)


@contextmanager
def launched_helix(url: str, agent: Agent, llm: LLMAdapter, name: str) -> Iterator[HelixDBOS]:
    """A `HelixDBOS` of one agent on `url`, launched (an executor id of its own), and
    shut down after."""
    helix = HelixDBOS(
        [agent],
        database_url=url,
        llm=llm,
        executor_id=f"bench-{name}-{uuid.uuid4().hex[:6]}",
        application_version=f"bench-{name}",
    )
    helix.launch()
    try:
        yield helix
    finally:
        helix.shutdown()
