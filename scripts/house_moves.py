"""Move helix_dbos's modules to the folder layout of docs/internals.md ("Code layout")
and rewrite every reference to them (issue 47, items 1 and 2).

Re-runnable: a second run on its own output changes nothing, and a run on a main that
merged a branch written against the old layout moves and rewrites what that branch added.
Run from the repository root: `python scripts/house_moves.py` (`--check` only reports).

What it rewrites, in helix_dbos/, tests/, benchmarks/, examples/, docs/, scripts/ and the
top-level README.md, mkdocs.yml and pyproject.toml:
- dotted names: `helix_dbos.runtime.agent_loop` in imports, `mock.patch`/monkeypatch
  targets and any string (a renamed module keeps its old name as the local alias in
  `from package import module` statements);
- `from helix_dbos.runtime import agent_loop, hitl` statements, split per new package;
- paths: `runtime/agent_loop.py` and `helix_dbos/runtime/agent_loop.py` (docs, docstrings,
  pyproject's per-file-ignores).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "helix_dbos"

# old module (under helix_dbos) -> new module. Packages first by layer, bottom to top.
_RUNTIME = {
    "dbos": ["dbos_internals"],
    "process": ["process_runtime", "outage", "event_loop", "idle_pool", "wait_parking",
                "workers", "model_limits", "patches", "parked_span"],
    "steps": ["step_types", "commit", "live_chunks", "tool_step", "spans", "run_trace",
              "closing", "results"],
    "waits": ["hitl", "message_recheck", "answer_send", "run_versions"],
    "sessions": ["run_opening", "session_queue", "steering", "session_reads", "handle"],
    "children": ["subagents", "companions", "remote_children"],
    "loop": ["agent_loop", "llm_step", "llm_hooks", "step_ahead", "step_rows", "reply_plan",
             "tool_batch", "final_write", "slow_head", "shared_values"],
    "starts": ["dispatch", "run_starts", "run_waits"],
    "control": ["run_control", "time_travel"],
}  # fmt: skip
MOVES: dict[str, str] = {
    f"runtime.{module}": f"runtime.{sub}.{module}"
    for sub, modules in _RUNTIME.items()
    for module in modules
}
MOVES.update(
    {
        # The facade: above runtime, memory, schedules, builtins (item 1).
        "runtime.helix": "facade.helix",
        "runtime.run_control_methods": "facade.run_control_methods",
        "runtime.session_queue_methods": "facade.session_queue_methods",
        "runtime.session_read_methods": "facade.session_read_methods",
        "runtime.time_travel_methods": "facade.time_travel_methods",
        # Schedules: one feature, one package, above runtime (item 2).
        "runtime.schedule_firing": "schedules.firing",
        "runtime.schedule_methods": "schedules.methods",
        "store.schedules": "schedules.book",
        # Names that said too little beside their namesakes in other folders.
        "server.errors": "server.error_responses",
        "server.checkpoints": "server.checkpoint_routes",
        "server.reads": "server.read_routes",
        "server.schedules": "server.schedule_routes",
        "memory.errors": "memory.memory_errors",
        "streaming.reads": "streaming.stream_reads",
        "store.companions": "store.companion_rows",
        "store.checkpoints": "store.checkpoint_rows",
        "store.session_queue": "store.queued_messages",
        # The A2A wire (task mapping, remote transport): below the facade that hands the
        # transport to the runtime, and below the server's A2A routes.
        "protocols.a2a.mapping": "a2a_wire.mapping",
        "protocols.a2a.remote": "a2a_wire.remote",
    }
)
# store/ (21 modules): the tables of features beside a run's core ones, a folder down.
MOVES.update(
    {
        f"store.{module}": f"store.features.{module}"
        for module in ("companion_rows", "mcp_tool_lists", "model_limits", "queued_messages",
                       "remote_children", "run_versions", "workers")
    }
)  # fmt: skip
# server/ (27 modules): HTTP plumbing and route modules in folders of their own.
MOVES.update(
    {
        f"server.{module}": f"server.http.{module}"
        for module in ("auth", "body", "cookies", "edge", "error_responses", "limits",
                       "route_context", "visibility", "keyed_start", "sse", "sse_fanout",
                       "streams")
    }
)  # fmt: skip
MOVES["server.routes"] = "server.endpoints.run_routes"
MOVES.update(
    {
        f"server.{module}": f"server.endpoints.{module}"
        for module in ("session_routes", "checkpoint_routes", "read_routes", "schedule_routes",
                       "chat")
    }
)  # fmt: skip


def _final(module: str) -> str:
    while module in MOVES:
        module = MOVES[module]
    return module


# A module renamed, then moved (server.errors -> server.error_responses -> server.http...):
# on a tree that has neither step done, one move straight to the end.
# Intermediate names were never released: no alias keeps them importable.
INTERMEDIATE = set(MOVES) & set(MOVES.values())
MOVES = {old: _final(old) for old in MOVES}
# An old name that prefixes its new one would be rewritten again on every run.
assert not [o for o, n in MOVES.items() if n.startswith(o + ".")], "move not idempotent"

# Whole packages moved as they are (after the modules above left them): the protocols
# under the server whose plumbing they use, so the two folders no longer import each other.
PACKAGE_MOVES: dict[str, str] = {"protocols": "server.protocols"}

# New packages and what each owns (their `__init__.py`, written when missing).
PACKAGE_DOCS: dict[str, str] = {
    "runtime.dbos": (
        "The one door to DBOS's private state: `dbos_internals.py` and `step_bookkeeping.py` "
        "are the only modules of helix_dbos that import `dbos._*` (pyproject's ruff ban and "
        "tests/test_architecture.py hold it), so a DBOS upgrade is read here first."
    ),
    "runtime.process": (
        "One worker process's state: the `Runtime` every step reads (`process_runtime.py`), "
        "the event loop bridge, idle-connection pool, outage detection, parked waits, the "
        "worker rows and leases, model rate limits and the named step-sequence patches. "
        "Nothing here knows what an agent run is."
    ),
    "runtime.steps": (
        "The durable building blocks of a run's steps: what a step returns "
        "(`step_types.py`), how it commits its rows and chunks (`commit.py`, "
        "`live_chunks.py`), one tool call (`tool_step.py`), spans and run traces, closing a "
        "run, and the results a finished run reads back."
    ),
    "runtime.waits": (
        "A run waiting for someone: approvals, client results and human input "
        "(`hitl.py`), re-checking messages that arrived while it waited, sending an answer "
        "to a waiting run, and refusing answers to runs of another version."
    ),
    "runtime.sessions": (
        "A session's runs: opening a run in its session, the session's queue of messages "
        "(double texting), steering a running run, reading sessions back, and the handle "
        "a caller waits on."
    ),
    "runtime.children": (
        "Runs started by a run: local sub-agents, companions and remote sub-agents (helix "
        "servers over HTTP; other transports, such as A2A, handed in from above)."
    ),
    "runtime.loop": (
        "The agent loop (`agent_loop.py`): one model step after another with its tools, "
        "replies planned ahead, rows written per step, and the final write that ends a run."
    ),
    "runtime.starts": (
        "Starting workflows: `dispatch.py` enqueues or starts a run's workflow, "
        "`run_starts.py` opens and starts runs for callers, and `run_waits.py` waits for "
        "their results."
    ),
    "runtime.control": (
        "Acting on runs from outside: interrupt, abort, resume, answer and roll back "
        "(`run_control.py`), and time travel to a checkpoint (`time_travel.py`)."
    ),
    "facade": (
        "`HelixDBOS`, the one object a user builds: it wires the layers below it (runtime, "
        "memory, schedules, built-in tools, the A2A transport) that must not import each "
        "other, and offers their methods."
    ),
    "store.features": (
        "The tables of features beside a run's core rows: companions, MCP tool lists, "
        "model rate limits, queued messages (double texting), remote children, run "
        "versions and workers. Each module owns its table's statements."
    ),
    "server.http": (
        "The HTTP plumbing every route and protocol shares: authentication and cookies, "
        "body and edge limits, error responses, the route context, visibility checks, "
        "keyed starts and server-sent events."
    ),
    "server.endpoints": (
        "helix's own HTTP routes, one module per resource: runs (`run_routes.py`), "
        "sessions, checkpoints, reads, schedules and the chat endpoint."
    ),
    "a2a_wire": (
        "A2A's wire (the `a2a-sdk` package, extra `a2a`): helix runs as A2A tasks and "
        "messages (`mapping.py`), and A2A agents as remote sub-agents (`remote.py`, the "
        "transport the facade hands to the runtime). The A2A routes are in "
        "`server/protocols/a2a/`."
    ),
    "schedules": (
        "Scheduled agents, one feature in one package: schedules and their firings in "
        "DBOS's schedule table and `helix.schedule_firings` (`book.py`), the workflow each "
        "firing runs (`firing.py`) and the methods `HelixDBOS` offers (`methods.py`). "
        "Their wire models stay in `definitions/schedule.py`, which the client reads."
    ),
}

SCAN_DIRS = ("helix_dbos", "tests", "benchmarks", "examples", "docs", "scripts")
SCAN_FILES = ("README.md", "mkdocs.yml", "pyproject.toml")
SUFFIXES = {".py", ".md", ".toml", ".yml", ".yaml", ".txt", ".cfg", ".ini", ".js", ".html"}
SELF = Path(__file__).resolve()
# Files that name old modules on purpose: never rewritten.
KEEP_OLD_NAMES = ("tests/test_moved_modules.py",)
# The table of old module names that unpickling still resolves (written by this script).
ALIASES = ROOT / PACKAGE / "moved_modules.py"

# Its table, between these lines, is what this script writes; the finder around it is code.
TABLE_START = "MOVED: dict[str, str] = {\n"
TABLE_END = "\n}\n"


def module_path(module: str) -> Path:
    return ROOT / PACKAGE / (module.replace(".", "/") + ".py")


def git(*args: str) -> None:
    subprocess.run(["git", *args], cwd=ROOT, check=True)


def aliases() -> dict[str, str]:
    """Old dotted name -> new one, for every moved module and every module of a moved
    package (found in its new place)."""
    table = {dotted(old): dotted(new) for old, new in MOVES.items() if old not in INTERMEDIATE}
    for old, new in PACKAGE_MOVES.items():
        folder = ROOT / PACKAGE / new.replace(".", "/")
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            inner = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            suffix = f".{inner}" if inner else ""
            moved_out = f"{old}{suffix}" in MOVES
            if not moved_out:
                table[dotted(f"{old}{suffix}")] = dotted(f"{new}{suffix}")
    return dict(sorted(table.items()))


def write_aliases(check: bool) -> list[str]:
    entries = "\n".join(f'    "{old}": "{new}",' for old, new in aliases().items())
    text = ALIASES.read_text()
    start = text.index(TABLE_START) + len(TABLE_START)
    end = text.index(TABLE_END, start)
    new_text = text[:start] + entries + text[end:]
    if new_text == text:
        return []
    if not check:
        ALIASES.write_text(new_text)
    return [f"write {ALIASES.relative_to(ROOT)}"]


def move_files(check: bool) -> list[str]:
    done = []
    for old, new in MOVES.items():
        source, target = module_path(old), module_path(new)
        if not source.exists():
            continue
        if target.exists():
            raise SystemExit(f"both {source} and {target} exist: resolve by hand")
        done.append(f"move {old} -> {new}")
        if not check:
            target.parent.mkdir(parents=True, exist_ok=True)
            git("mv", str(source.relative_to(ROOT)), str(target.relative_to(ROOT)))
    for old_package, new_package in PACKAGE_MOVES.items():
        source = ROOT / PACKAGE / old_package.replace(".", "/")
        target = ROOT / PACKAGE / new_package.replace(".", "/")
        if not source.exists():
            continue
        if target.exists():
            raise SystemExit(f"both {source} and {target} exist: resolve by hand")
        done.append(f"move package {old_package} -> {new_package}")
        if not check:
            git("mv", str(source.relative_to(ROOT)), str(target.relative_to(ROOT)))
    for package, doc in PACKAGE_DOCS.items():
        init = ROOT / PACKAGE / package.replace(".", "/") / "__init__.py"
        if not init.exists():
            done.append(f"create {init.relative_to(ROOT)}")
            if not check:
                init.parent.mkdir(parents=True, exist_ok=True)
                init.write_text(f'"""{wrap(doc)}"""\n')
                git("add", str(init.relative_to(ROOT)))
    return done


def wrap(text: str, width: int = 92) -> str:
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return "\n".join([*lines, line]) + "\n"


def dotted(module: str) -> str:
    return f"{PACKAGE}.{module}"


def rel_path(module: str) -> str:
    return module.replace(".", "/") + ".py"


# `from helix_dbos.x import a, b as c` (one line or parenthesised).
_FROM = re.compile(
    r"^(?P<indent>[ \t]*)from (?P<base>helix_dbos(?:\.\w+)*) import "
    r"(?:\((?P<paren>[^)]*)\)|(?P<plain>[^\n#(]+?))(?P<comment>[ \t]*#[^\n]*)?$",
    re.MULTILINE,
)


def _split_from(match: re.Match[str]) -> str:
    """`from helix_dbos.runtime import agent_loop, hitl` -> one statement per new parent."""
    base = match["base"]
    names_text = match["paren"] if match["paren"] is not None else match["plain"]
    entries = [e.strip() for e in re.sub(r"#[^\n]*", "", names_text).split(",") if e.strip()]
    parsed = []
    moved = False
    for entry in entries:
        name, _, alias = (part.strip() for part in entry.partition(" as "))
        old = f"{base[len(PACKAGE) + 1 :]}.{name}" if base != PACKAGE else name
        new = MOVES.get(old)
        if new is None:
            parsed.append((base, name, alias))
            continue
        moved = True
        parent, _, leaf = new.rpartition(".")
        local = alias or (name if leaf != name else "")
        parsed.append((dotted(parent), leaf, local))
    if not moved:
        return match[0]
    groups: dict[str, list[str]] = {}
    for parent, name, alias in parsed:
        groups.setdefault(parent, []).append(f"{name} as {alias}" if alias else name)
    indent, comment = match["indent"], match["comment"] or ""
    lines = [f"{indent}from {parent} import {', '.join(names)}" for parent, names in groups.items()]
    lines[0] += comment
    return "\n".join(lines)


def rewrite(text: str) -> str:
    text = _FROM.sub(_split_from, text)
    renames = [(old, new, False) for old, new in MOVES.items()]
    renames += [(old, new, True) for old, new in PACKAGE_MOVES.items()]
    for old, new, is_package in sorted(renames, key=lambda item: -len(item[0])):
        text = re.sub(rf"(?<![\w.]){re.escape(dotted(old))}(?!\w)", dotted(new), text)
        if is_package:  # `protocols/a2a/handler.py`, not docs' own `protocols/ag-ui.md`
            old_path, new_path = old.replace(".", "/") + "/", new.replace(".", "/") + "/"
            text = re.sub(
                rf"(?<![\w/.])((?:{PACKAGE}/)?){re.escape(old_path)}(?=[\w/]*\.py(?!\w))",
                rf"\g<1>{new_path}",
                text,
            )
            continue
        text = re.sub(
            rf"(?<![\w/.])((?:{PACKAGE}/)?){re.escape(rel_path(old))}(?![\w])",
            rf"\g<1>{rel_path(new)}",
            text,
        )
    return text


def scanned_files() -> list[Path]:
    skip = {SELF, ALIASES.resolve(), *(ROOT / name for name in KEEP_OLD_NAMES)}
    files = [ROOT / name for name in SCAN_FILES if (ROOT / name).exists()]
    for folder in SCAN_DIRS:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and path.suffix in SUFFIXES and path.resolve() not in skip:
                files.append(path)
    return [path for path in files if ".venv" not in path.parts]


def rewrite_files(check: bool) -> list[str]:
    changed = []
    for path in scanned_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        new = rewrite(text)
        if new != text:
            changed.append(f"rewrite {path.relative_to(ROOT)}")
            if not check:
                path.write_text(new)
    return changed


def main(argv: list[str]) -> int:
    check = "--check" in argv
    done = move_files(check) + rewrite_files(check) + write_aliases(check)
    print("\n".join(done) or "nothing to do")
    if not check and done:
        subprocess.run(
            [sys.executable, "-m", "ruff", "check", "--select", "I", "--fix", "-q", "."],
            cwd=ROOT,
            check=False,
        )
        subprocess.run([sys.executable, "-m", "ruff", "format", "-q", "."], cwd=ROOT, check=False)
    return 1 if check and done else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
