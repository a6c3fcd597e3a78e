"""Durable LLM agents on DBOS Transact and PostgreSQL."""

# Imported for its effect too: it registers seed 003's built-ins by name.
from helix_dbos.builtins import builtin_tools
from helix_dbos.definitions.agent import Agent, LLMConfig, PersistentAgent, TerminatingConfig
from helix_dbos.definitions.context import ToolContext
from helix_dbos.definitions.hooks import AgentHooks
from helix_dbos.definitions.queue import RateLimit, RunQueue
from helix_dbos.definitions.subagent import SubAgentTool, sub_agent_tool
from helix_dbos.definitions.tool import Tool, tool
from helix_dbos.errors import (
    AgentAlreadyRunningError,
    AgentDefinitionError,
    AgentNotRegisteredError,
    ExecutorIdInUseError,
    HelixError,
    LLMConfigurationError,
    RunNotFoundError,
    SessionNotFoundError,
    ToolDefinitionError,
    WorkerNotDeadError,
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
    "ExecutorIdInUseError",
    "HelixDBOS",
    "HelixError",
    "LLMConfig",
    "LLMConfigurationError",
    "Message",
    "MockLLM",
    "PersistentAgent",
    "RunHandle",
    "RunInfo",
    "RunNotFoundError",
    "RunQueue",
    "RateLimit",
    "SessionInfo",
    "SessionNotFoundError",
    "SubAgentTool",
    "TerminatingConfig",
    "builtin_tools",
    "sub_agent_tool",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolDefinitionError",
    "tool",
    "WorkerNotDeadError",
]
