"""Durable LLM agents on DBOS Transact and PostgreSQL.

Everything a user needs is importable from here; deeper modules are the implementation.
Names load on first use (PEP 562), so `import helix_dbos` and the `helix-dbos` CLI,
which lives in this package, do not pay for DBOS, SQLAlchemy or FastAPI until they use
them (a read command answers in a fraction of a second).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from helix_dbos import lazy_names, moved_modules, named_tools

# Runs checkpointed before issue 47's layout name moved modules in their pickles.
moved_modules.install()


def _load_named_tools() -> None:
    """The built-in and memory tools, registered by importing their modules: they sit
    above `definitions/`, which resolves `tools=["__complete__"]`, so they are handed in
    from here, the top, and loaded only when a name is first asked for."""
    from helix_dbos import builtins  # noqa: F401, PLC0415 - registers on import
    from helix_dbos.memory import tools  # noqa: F401, PLC0415 - registers on import


named_tools.add_source(_load_named_tools)

if TYPE_CHECKING:
    from helix_dbos.api.answers import Answer, Approval, ClientResult, Denial, HumanInput
    from helix_dbos.api.checkpoints import Checkpoint, CheckpointView
    from helix_dbos.api.runs import PendingToolCall, RunInfo, SessionInfo, UsageSummary
    from helix_dbos.builtins import (
        builtin_tools,
        complete_tool,
        log_progress_tool,
        pause_for_human_tool,
        retrieve_memory_tool,
        run_workflow_tool,
        store_memory_tool,
    )
    from helix_dbos.client import AsyncHelixClient, HelixClient
    from helix_dbos.definitions.agent import (
        Agent,
        LLMConfig,
        PersistentAgent,
        TerminatingConfig,
    )
    from helix_dbos.definitions.handoffs import Handoff
    from helix_dbos.definitions.hooks import AgentHooks
    from helix_dbos.definitions.queue import RateLimit, RunQueue
    from helix_dbos.definitions.remote_subagent import RemoteSubAgentTool, remote_sub_agent_tool
    from helix_dbos.definitions.subagent import SubAgentTool, sub_agent_tool
    from helix_dbos.definitions.tool import Tool, tool
    from helix_dbos.definitions.tool_context import ToolContext
    from helix_dbos.errors import (
        AgentAlreadyRunningError,
        AgentDefinitionError,
        AgentNotRegisteredError,
        CheckpointNotFoundError,
        ContentPartError,
        ContentTooLargeError,
        DatabaseUnavailableError,
        ExecutorIdInUseError,
        GuardrailTripped,
        HelixError,
        InvalidAnswerError,
        InvalidInputError,
        LLMConfigurationError,
        RunNotActiveError,
        RunNotFoundError,
        RunOnOtherVersionError,
        SessionAgentMismatchError,
        SessionNotFoundError,
        StateUpdateError,
        ToolArgumentsError,
        ToolCallAlreadyAnsweredError,
        ToolCallNotFoundError,
        ToolDefinitionError,
        ToolOutputError,
        UsageLimitExceeded,
        WorkerNotDeadError,
    )
    from helix_dbos.facade.helix import HelixDBOS
    from helix_dbos.llm.base import LLMAdapter, LLMProviderError
    from helix_dbos.llm.mock import MockLLM
    from helix_dbos.llm.providers import model_from_env, register_provider
    from helix_dbos.mcp import MCPHTTP, MCPStdio, MCPToolset
    from helix_dbos.memory import (
        BackgroundEmbeddingExecutor,
        Embedder,
        EmbeddingDimensionError,
        EmbeddingError,
        HashingEmbedder,
        InlineEmbeddingExecutor,
        InvalidMemoryError,
        Memory,
        MemoryHit,
        MemoryManager,
        VectorSearchUnavailableError,
        recall_hooks,
    )
    from helix_dbos.memory.openai_embedder import OpenAIEmbedder
    from helix_dbos.orchestration.guardrails import GuardrailResult, input_guardrail
    from helix_dbos.orchestration.history.policy import (
        CharEstimate,
        DropToolResults,
        HistoryPolicy,
        KeepLastTurns,
        Summarize,
        TokenCounter,
    )
    from helix_dbos.orchestration.history.summary_prompt import is_summary_request
    from helix_dbos.orchestration.parts import BinaryContent, DocumentUrl, ImageUrl, StoredBlob
    from helix_dbos.orchestration.types import (
        ErrorStepResult,
        LLMRequest,
        LLMUsage,
        Message,
        StepResult,
        StructuredOutputStepResult,
        TextStepResult,
        ToolCall,
        ToolCallsStepResult,
    )
    from helix_dbos.orchestration.usage_limits import UsageLimits
    from helix_dbos.otel import instrument, uninstrument
    from helix_dbos.runtime.control.time_travel import PruneReport
    from helix_dbos.runtime.process.workers import default_executor_id
    from helix_dbos.runtime.sessions.handle import RunHandle
    from helix_dbos.runtime.steps.results import AgentResult
    from helix_dbos.server import Principal, bearer_token, create_app
    from helix_dbos.server.protocols.mcp_task_client import MCPTasks
    from helix_dbos.store.database import (
        libpq_url,
        resolve_database_url,
        sqlalchemy_url,
        with_database,
    )
    from helix_dbos.streaming.chunks import (
        HumanRequest,
        StatePatch,
        StreamChunk,
        TextDelta,
        ToolEnd,
        ToolStart,
    )
    from helix_dbos.streaming.progress import log_steps

# Each public name and the module that defines it.
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(
        ["Answer", "Approval", "ClientResult", "Denial", "HumanInput"], "helix_dbos.api.answers"
    ),
    **dict.fromkeys(["Checkpoint", "CheckpointView"], "helix_dbos.api.checkpoints"),
    **dict.fromkeys(
        ["PendingToolCall", "RunInfo", "SessionInfo", "UsageSummary"], "helix_dbos.api.runs"
    ),
    **dict.fromkeys(
        [
            "builtin_tools",
            "complete_tool",
            "log_progress_tool",
            "pause_for_human_tool",
            "retrieve_memory_tool",
            "run_workflow_tool",
            "store_memory_tool",
        ],
        "helix_dbos.builtins",
    ),
    **dict.fromkeys(
        ["Agent", "LLMConfig", "PersistentAgent", "TerminatingConfig"],
        "helix_dbos.definitions.agent",
    ),
    "ToolContext": "helix_dbos.definitions.tool_context",
    "AgentHooks": "helix_dbos.definitions.hooks",
    "UsageLimits": "helix_dbos.orchestration.usage_limits",
    **dict.fromkeys(["GuardrailResult", "input_guardrail"], "helix_dbos.orchestration.guardrails"),
    **dict.fromkeys(["RateLimit", "RunQueue"], "helix_dbos.definitions.queue"),
    **dict.fromkeys(["SubAgentTool", "sub_agent_tool"], "helix_dbos.definitions.subagent"),
    "Handoff": "helix_dbos.definitions.handoffs",
    **dict.fromkeys(
        ["RemoteSubAgentTool", "remote_sub_agent_tool"], "helix_dbos.definitions.remote_subagent"
    ),
    **dict.fromkeys(["AsyncHelixClient", "HelixClient"], "helix_dbos.client"),
    **dict.fromkeys(["Tool", "tool"], "helix_dbos.definitions.tool"),
    **dict.fromkeys(
        [
            "AgentAlreadyRunningError",
            "AgentDefinitionError",
            "AgentNotRegisteredError",
            "CheckpointNotFoundError",
            "ContentPartError",
            "ContentTooLargeError",
            "DatabaseUnavailableError",
            "ExecutorIdInUseError",
            "HelixError",
            "InvalidAnswerError",
            "InvalidInputError",
            "LLMConfigurationError",
            "UsageLimitExceeded",
            "GuardrailTripped",
            "RunNotActiveError",
            "RunNotFoundError",
            "RunOnOtherVersionError",
            "SessionAgentMismatchError",
            "SessionNotFoundError",
            "StateUpdateError",
            "ToolArgumentsError",
            "ToolCallAlreadyAnsweredError",
            "ToolCallNotFoundError",
            "ToolDefinitionError",
            "ToolOutputError",
            "WorkerNotDeadError",
        ],
        "helix_dbos.errors",
    ),
    **dict.fromkeys(["LLMAdapter", "LLMProviderError"], "helix_dbos.llm.base"),
    "MockLLM": "helix_dbos.llm.mock",
    **dict.fromkeys(
        [
            "CharEstimate",
            "DropToolResults",
            "HistoryPolicy",
            "KeepLastTurns",
            "Summarize",
            "TokenCounter",
        ],
        "helix_dbos.orchestration.history.policy",
    ),
    "is_summary_request": "helix_dbos.orchestration.history.summary_prompt",
    **dict.fromkeys(["model_from_env", "register_provider"], "helix_dbos.llm.providers"),
    **dict.fromkeys(["MCPHTTP", "MCPStdio", "MCPToolset"], "helix_dbos.mcp"),
    "MCPTasks": "helix_dbos.server.protocols.mcp_task_client",
    **dict.fromkeys(
        [
            "BackgroundEmbeddingExecutor",
            "Embedder",
            "EmbeddingDimensionError",
            "EmbeddingError",
            "HashingEmbedder",
            "InlineEmbeddingExecutor",
            "InvalidMemoryError",
            "Memory",
            "MemoryHit",
            "MemoryManager",
            "VectorSearchUnavailableError",
            "recall_hooks",
        ],
        "helix_dbos.memory",
    ),
    "OpenAIEmbedder": "helix_dbos.memory.openai_embedder",
    **dict.fromkeys(
        ["BinaryContent", "DocumentUrl", "ImageUrl", "StoredBlob"], "helix_dbos.orchestration.parts"
    ),
    **dict.fromkeys(
        [
            "ErrorStepResult",
            "LLMRequest",
            "LLMUsage",
            "Message",
            "StepResult",
            "StructuredOutputStepResult",
            "TextStepResult",
            "ToolCall",
            "ToolCallsStepResult",
        ],
        "helix_dbos.orchestration.types",
    ),
    **dict.fromkeys(["instrument", "uninstrument"], "helix_dbos.otel"),
    "HelixDBOS": "helix_dbos.facade.helix",
    "RunHandle": "helix_dbos.runtime.sessions.handle",
    "AgentResult": "helix_dbos.runtime.steps.results",
    "PruneReport": "helix_dbos.runtime.control.time_travel",
    "default_executor_id": "helix_dbos.runtime.process.workers",
    **dict.fromkeys(["Principal", "bearer_token", "create_app"], "helix_dbos.server"),
    **dict.fromkeys(
        ["libpq_url", "resolve_database_url", "sqlalchemy_url", "with_database"],
        "helix_dbos.store.database",
    ),
    **dict.fromkeys(
        ["HumanRequest", "StatePatch", "StreamChunk", "TextDelta", "ToolEnd", "ToolStart"],
        "helix_dbos.streaming.chunks",
    ),
    "log_steps": "helix_dbos.streaming.progress",
}

__all__ = [
    "Agent",
    "CharEstimate",
    "DropToolResults",
    "HistoryPolicy",
    "KeepLastTurns",
    "Summarize",
    "TokenCounter",
    "is_summary_request",
    "Answer",
    "Approval",
    "ClientResult",
    "Denial",
    "HumanInput",
    "BinaryContent",
    "ContentPartError",
    "ContentTooLargeError",
    "DocumentUrl",
    "ImageUrl",
    "StoredBlob",
    "AgentAlreadyRunningError",
    "AgentDefinitionError",
    "AgentHooks",
    "AgentNotRegisteredError",
    "AgentResult",
    "Checkpoint",
    "CheckpointNotFoundError",
    "CheckpointView",
    "ErrorStepResult",
    "DatabaseUnavailableError",
    "ExecutorIdInUseError",
    "HelixDBOS",
    "HelixError",
    "HumanRequest",
    "InvalidAnswerError",
    "InvalidInputError",
    "LLMAdapter",
    "LLMConfig",
    "LLMConfigurationError",
    "LLMProviderError",
    "LLMRequest",
    "LLMUsage",
    "MCPHTTP",
    "MCPStdio",
    "MCPTasks",
    "MCPToolset",
    "PruneReport",
    "Message",
    "MockLLM",
    "PendingToolCall",
    "PersistentAgent",
    "Handoff",
    "Principal",
    "RateLimit",
    "RunHandle",
    "RunInfo",
    "RunNotActiveError",
    "RunNotFoundError",
    "RunOnOtherVersionError",
    "RunQueue",
    "SessionAgentMismatchError",
    "SessionInfo",
    "SessionNotFoundError",
    "StatePatch",
    "StateUpdateError",
    "StepResult",
    "StreamChunk",
    "StructuredOutputStepResult",
    "SubAgentTool",
    "RemoteSubAgentTool",
    "HelixClient",
    "AsyncHelixClient",
    "TerminatingConfig",
    "UsageLimitExceeded",
    "UsageLimits",
    "GuardrailResult",
    "GuardrailTripped",
    "input_guardrail",
    "TextDelta",
    "TextStepResult",
    "Tool",
    "ToolArgumentsError",
    "ToolCall",
    "ToolCallAlreadyAnsweredError",
    "ToolCallNotFoundError",
    "ToolCallsStepResult",
    "ToolContext",
    "ToolDefinitionError",
    "ToolEnd",
    "ToolOutputError",
    "ToolStart",
    "UsageSummary",
    "WorkerNotDeadError",
    "bearer_token",
    "builtin_tools",
    "complete_tool",
    "create_app",
    "default_executor_id",
    "instrument",
    "libpq_url",
    "log_progress_tool",
    "log_steps",
    "model_from_env",
    "pause_for_human_tool",
    "register_provider",
    "resolve_database_url",
    "retrieve_memory_tool",
    "run_workflow_tool",
    "sqlalchemy_url",
    "with_database",
    "store_memory_tool",
    "sub_agent_tool",
    "remote_sub_agent_tool",
    "tool",
    "uninstrument",
    "BackgroundEmbeddingExecutor",
    "Embedder",
    "EmbeddingDimensionError",
    "EmbeddingError",
    "HashingEmbedder",
    "InlineEmbeddingExecutor",
    "InvalidMemoryError",
    "Memory",
    "MemoryHit",
    "MemoryManager",
    "VectorSearchUnavailableError",
    "recall_hooks",
    "OpenAIEmbedder",
]


__getattr__ = lazy_names.lazy_getattr(__name__, _EXPORTS, globals())


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
