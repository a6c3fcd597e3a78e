"""Durable LLM agents on DBOS Transact and PostgreSQL."""

# Imported for its effect too: it registers seed 003's built-ins by name.
from helix_dbos.builtins import builtin_tools
from helix_dbos.definitions.agent import Agent, LLMConfig, TerminatingConfig
from helix_dbos.definitions.context import ToolContext
from helix_dbos.definitions.hooks import AgentHooks
from helix_dbos.definitions.queue import RateLimit, RunQueue
from helix_dbos.definitions.tool import Tool, tool
from helix_dbos.errors import (
    AgentAlreadyRunningError,
    AgentDefinitionError,
    AgentNotRegisteredError,
    HelixError,
    RunNotFoundError,
    SessionNotFoundError,
    ToolDefinitionError,
)
from helix_dbos.llm.mock import MockLLM
from helix_dbos.orchestration.types import Message, ToolCall
from helix_dbos.runtime.executor import HelixDBOS
from helix_dbos.runtime.handle import RunHandle
from helix_dbos.runtime.results import AgentResult, RunInfo, SessionInfo

__all__ = [
    "Agent",
    "AgentAlreadyRunningError",
    "AgentDefinitionError",
    "AgentHooks",
    "AgentNotRegisteredError",
    "AgentResult",
    "HelixDBOS",
    "HelixError",
    "LLMConfig",
    "Message",
    "MockLLM",
    "RunHandle",
    "RunInfo",
    "RunNotFoundError",
    "RunQueue",
    "RateLimit",
    "SessionInfo",
    "SessionNotFoundError",
    "TerminatingConfig",
    "builtin_tools",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolDefinitionError",
    "tool",
]
