"""Durable LLM agents on DBOS Transact and PostgreSQL."""

from helix_dbos.definitions.agent import Agent, LLMConfig, TerminatingConfig
from helix_dbos.definitions.context import ToolContext
from helix_dbos.definitions.hooks import AgentHooks
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
    "SessionInfo",
    "SessionNotFoundError",
    "TerminatingConfig",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolDefinitionError",
    "tool",
]
