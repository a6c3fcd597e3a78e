"""Old module names of helix_dbos that still import, as the modules now holding them.

DBOS pickles step outputs, results and messages, and a pickle names each class by its
module: a run checkpointed before a module moved (issue 47's layout) is replayed by this
code, so `pickle.loads` must still find `helix_dbos.runtime.step_types.ToolOutcome`.
`install()` (run by `helix_dbos/__init__.py`, before any submodule) adds a finder that
answers an old name with the new module itself: no copy, no second import. Written by
scripts/house_moves.py from its table; edit the table there, not here.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType

MOVED: dict[str, str] = {
    "helix_dbos.memory.errors": "helix_dbos.memory.memory_errors",
    "helix_dbos.protocols": "helix_dbos.server.protocols",
    "helix_dbos.protocols.a2a": "helix_dbos.server.protocols.a2a",
    "helix_dbos.protocols.a2a.answers": "helix_dbos.server.protocols.a2a.answers",
    "helix_dbos.protocols.a2a.card": "helix_dbos.server.protocols.a2a.card",
    "helix_dbos.protocols.a2a.handler": "helix_dbos.server.protocols.a2a.handler",
    "helix_dbos.protocols.a2a.mapping": "helix_dbos.a2a_wire.mapping",
    "helix_dbos.protocols.a2a.remote": "helix_dbos.a2a_wire.remote",
    "helix_dbos.protocols.a2a.routes": "helix_dbos.server.protocols.a2a.routes",
    "helix_dbos.protocols.ag_ui": "helix_dbos.server.protocols.ag_ui",
    "helix_dbos.protocols.ag_ui_answers": "helix_dbos.server.protocols.ag_ui_answers",
    "helix_dbos.protocols.ag_ui_events": "helix_dbos.server.protocols.ag_ui_events",
    "helix_dbos.protocols.ai_sdk": "helix_dbos.server.protocols.ai_sdk",
    "helix_dbos.protocols.ai_sdk_models": "helix_dbos.server.protocols.ai_sdk_models",
    "helix_dbos.protocols.ai_sdk_parts": "helix_dbos.server.protocols.ai_sdk_parts",
    "helix_dbos.protocols.mcp_openapi": "helix_dbos.server.protocols.mcp_openapi",
    "helix_dbos.protocols.mcp_server": "helix_dbos.server.protocols.mcp_server",
    "helix_dbos.protocols.mcp_task_client": "helix_dbos.server.protocols.mcp_task_client",
    "helix_dbos.protocols.mcp_tasks": "helix_dbos.server.protocols.mcp_tasks",
    "helix_dbos.runtime.agent_loop": "helix_dbos.runtime.loop.agent_loop",
    "helix_dbos.runtime.answer_send": "helix_dbos.runtime.waits.answer_send",
    "helix_dbos.runtime.closing": "helix_dbos.runtime.steps.closing",
    "helix_dbos.runtime.commit": "helix_dbos.runtime.steps.commit",
    "helix_dbos.runtime.companions": "helix_dbos.runtime.children.companions",
    "helix_dbos.runtime.dbos_internals": "helix_dbos.runtime.dbos.dbos_internals",
    "helix_dbos.runtime.dispatch": "helix_dbos.runtime.starts.dispatch",
    "helix_dbos.runtime.event_loop": "helix_dbos.runtime.process.event_loop",
    "helix_dbos.runtime.final_write": "helix_dbos.runtime.loop.final_write",
    "helix_dbos.runtime.handle": "helix_dbos.runtime.sessions.handle",
    "helix_dbos.runtime.helix": "helix_dbos.facade.helix",
    "helix_dbos.runtime.hitl": "helix_dbos.runtime.waits.hitl",
    "helix_dbos.runtime.idle_pool": "helix_dbos.runtime.process.idle_pool",
    "helix_dbos.runtime.live_chunks": "helix_dbos.runtime.steps.live_chunks",
    "helix_dbos.runtime.llm_hooks": "helix_dbos.runtime.loop.llm_hooks",
    "helix_dbos.runtime.llm_step": "helix_dbos.runtime.loop.llm_step",
    "helix_dbos.runtime.message_recheck": "helix_dbos.runtime.waits.message_recheck",
    "helix_dbos.runtime.model_limits": "helix_dbos.runtime.process.model_limits",
    "helix_dbos.runtime.outage": "helix_dbos.runtime.process.outage",
    "helix_dbos.runtime.parked_span": "helix_dbos.runtime.process.parked_span",
    "helix_dbos.runtime.patches": "helix_dbos.runtime.process.patches",
    "helix_dbos.runtime.process_runtime": "helix_dbos.runtime.process.process_runtime",
    "helix_dbos.runtime.remote_children": "helix_dbos.runtime.children.remote_children",
    "helix_dbos.runtime.reply_plan": "helix_dbos.runtime.loop.reply_plan",
    "helix_dbos.runtime.results": "helix_dbos.runtime.steps.results",
    "helix_dbos.runtime.run_control": "helix_dbos.runtime.control.run_control",
    "helix_dbos.runtime.run_control_methods": "helix_dbos.facade.run_control_methods",
    "helix_dbos.runtime.run_opening": "helix_dbos.runtime.sessions.run_opening",
    "helix_dbos.runtime.run_starts": "helix_dbos.runtime.starts.run_starts",
    "helix_dbos.runtime.run_trace": "helix_dbos.runtime.steps.run_trace",
    "helix_dbos.runtime.run_versions": "helix_dbos.runtime.waits.run_versions",
    "helix_dbos.runtime.run_waits": "helix_dbos.runtime.starts.run_waits",
    "helix_dbos.runtime.schedule_firing": "helix_dbos.schedules.firing",
    "helix_dbos.runtime.schedule_methods": "helix_dbos.schedules.methods",
    "helix_dbos.runtime.session_queue": "helix_dbos.runtime.sessions.session_queue",
    "helix_dbos.runtime.session_queue_methods": "helix_dbos.facade.session_queue_methods",
    "helix_dbos.runtime.session_read_methods": "helix_dbos.facade.session_read_methods",
    "helix_dbos.runtime.session_reads": "helix_dbos.runtime.sessions.session_reads",
    "helix_dbos.runtime.shared_values": "helix_dbos.runtime.loop.shared_values",
    "helix_dbos.runtime.slow_head": "helix_dbos.runtime.loop.slow_head",
    "helix_dbos.runtime.spans": "helix_dbos.runtime.steps.spans",
    "helix_dbos.runtime.steering": "helix_dbos.runtime.sessions.steering",
    "helix_dbos.runtime.step_ahead": "helix_dbos.runtime.loop.step_ahead",
    "helix_dbos.runtime.step_rows": "helix_dbos.runtime.loop.step_rows",
    "helix_dbos.runtime.step_types": "helix_dbos.runtime.steps.step_types",
    "helix_dbos.runtime.subagents": "helix_dbos.runtime.children.subagents",
    "helix_dbos.runtime.time_travel": "helix_dbos.runtime.control.time_travel",
    "helix_dbos.runtime.time_travel_methods": "helix_dbos.facade.time_travel_methods",
    "helix_dbos.runtime.tool_batch": "helix_dbos.runtime.loop.tool_batch",
    "helix_dbos.runtime.tool_step": "helix_dbos.runtime.steps.tool_step",
    "helix_dbos.runtime.wait_parking": "helix_dbos.runtime.process.wait_parking",
    "helix_dbos.runtime.workers": "helix_dbos.runtime.process.workers",
    "helix_dbos.server.auth": "helix_dbos.server.http.auth",
    "helix_dbos.server.body": "helix_dbos.server.http.body",
    "helix_dbos.server.chat": "helix_dbos.server.endpoints.chat",
    "helix_dbos.server.checkpoints": "helix_dbos.server.endpoints.checkpoint_routes",
    "helix_dbos.server.cookies": "helix_dbos.server.http.cookies",
    "helix_dbos.server.edge": "helix_dbos.server.http.edge",
    "helix_dbos.server.errors": "helix_dbos.server.http.error_responses",
    "helix_dbos.server.keyed_start": "helix_dbos.server.http.keyed_start",
    "helix_dbos.server.limits": "helix_dbos.server.http.limits",
    "helix_dbos.server.reads": "helix_dbos.server.endpoints.read_routes",
    "helix_dbos.server.route_context": "helix_dbos.server.http.route_context",
    "helix_dbos.server.routes": "helix_dbos.server.endpoints.run_routes",
    "helix_dbos.server.schedules": "helix_dbos.server.endpoints.schedule_routes",
    "helix_dbos.server.session_routes": "helix_dbos.server.endpoints.session_routes",
    "helix_dbos.server.sse": "helix_dbos.server.http.sse",
    "helix_dbos.server.sse_fanout": "helix_dbos.server.http.sse_fanout",
    "helix_dbos.server.streams": "helix_dbos.server.http.streams",
    "helix_dbos.server.visibility": "helix_dbos.server.http.visibility",
    "helix_dbos.store.checkpoints": "helix_dbos.store.checkpoint_rows",
    "helix_dbos.store.companions": "helix_dbos.store.features.companion_rows",
    "helix_dbos.store.mcp_tool_lists": "helix_dbos.store.features.mcp_tool_lists",
    "helix_dbos.store.model_limits": "helix_dbos.store.features.model_limits",
    "helix_dbos.store.remote_children": "helix_dbos.store.features.remote_children",
    "helix_dbos.store.run_versions": "helix_dbos.store.features.run_versions",
    "helix_dbos.store.schedules": "helix_dbos.schedules.book",
    "helix_dbos.store.session_queue": "helix_dbos.store.features.queued_messages",
    "helix_dbos.store.workers": "helix_dbos.store.features.workers",
    "helix_dbos.streaming.reads": "helix_dbos.streaming.stream_reads",
}


class _AliasLoader(Loader):
    def __init__(self, target: str) -> None:
        self.target = target
        self.own_spec: ModuleSpec | None = None

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.target)
        self.own_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system stamped the old name's spec on the module: give its own back.
        module.__spec__ = self.own_spec


class _MovedModuleFinder(MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        new = MOVED.get(fullname)
        return None if new is None else ModuleSpec(fullname, _AliasLoader(new))


_FINDER = _MovedModuleFinder()


def install() -> None:
    """Resolve old module names (idempotent)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
