"""CPU seconds per test module, when HELIX_TEST_CPU_REPORT names a file (off otherwise).

On 2 cores the suite is bound by CPU more than by waiting, and `--durations` shows wall
time, which a test that sleeps spends for free. Each test's share is the CPU its pytest
process used (user + system) and that of the subprocesses it waited for (the crash apps,
the CLI, `npm`, whether exec'd or forked by `tests/apps/forkserver.py`), measured around
its setup, call and teardown. Each pytest-xdist worker appends one line per module to
the file; the summary at the end lists the top modules.
The embedded PostgreSQL is a daemon of its own: its CPU is not counted, as in
`/usr/bin/time`.
"""

from __future__ import annotations

import json
import os
import resource
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from forkserver import forked_cpu_seconds

_ENV = "HELIX_TEST_CPU_REPORT"
_spent: dict[str, float] = defaultdict(float)


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    forked = forked_cpu_seconds()  # children forked by the fork server, once waited for
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + forked


def pytest_configure(config: pytest.Config) -> None:
    target = os.environ.get(_ENV)
    if target and not os.environ.get("PYTEST_XDIST_WORKER"):
        Path(target).unlink(missing_ok=True)  # this session's figures only


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    if not os.environ.get(_ENV):
        yield
        return
    before = _cpu()
    yield
    _spent[item.nodeid.split("::", 1)[0]] += _cpu() - before


def pytest_sessionfinish(session: pytest.Session) -> None:
    target = os.environ.get(_ENV)
    if not target or not _spent:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(target, "a") as out:  # one short write per line: workers do not interleave
        for module, seconds in _spent.items():
            out.write(json.dumps({"worker": worker, "module": module, "cpu": seconds}) + "\n")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    target = os.environ.get(_ENV)
    if not target or os.environ.get("PYTEST_XDIST_WORKER") or not Path(target).exists():
        return
    total: dict[str, float] = defaultdict(float)
    for line in Path(target).read_text().splitlines():
        row = json.loads(line)
        total[row["module"]] += row["cpu"]
    terminalreporter.section(f"CPU seconds per module ({sum(total.values()):.0f} s in all)")
    for module, seconds in sorted(total.items(), key=lambda kv: -kv[1])[:30]:
        terminalreporter.write_line(f"{seconds:8.1f}  {module}")
