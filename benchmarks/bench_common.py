"""What every benchmark script shares: JSON-friendly rounding, CPU time, percentiles,
and an optional pyinstrument profile of one phase."""

from __future__ import annotations

import resource
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


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


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


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
