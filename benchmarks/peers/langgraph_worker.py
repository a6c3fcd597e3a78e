"""LangGraph with its Postgres checkpointer (`langgraph-checkpoint-postgres`).

The graph is LangGraph's documented tool-calling agent: an `agent` node calling a chat
model bound to the tools, a prebuilt `ToolNode`, and `tools_condition`-style routing;
the structured output is the documented "respond tool" pattern (the model calls a
tool whose schema is `Answer`; the agent node parses it into `answer` and the graph
ends). The model is a tiny `BaseChatModel` subclass emitting the scripted tool calls.

Durability: `PostgresSaver` on a psycopg connection (`autocommit=True,
prepare_threshold=0, row_factory=dict_row`, as its README says), `checkpointer.setup()`
once, each run on its own `thread_id`, LangGraph's default durability mode ("async":
the checkpoint of a step is written while the next step runs). `--sync` uses
`durability="sync"` (each checkpoint written before the next step starts).
History: the thread's `messages` state, written with `update_state` before the run.

LangGraph has no automatic recovery: after a crash, the documented way on is to invoke
the graph again with `None` as input and the same `thread_id`, which resumes from the
last checkpoint.
"""

from __future__ import annotations

import sys
import uuid
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from psycopg import Connection
from psycopg.rows import dict_row

from benchmarks.peers.common import (
    SCRIPT,
    Answer,
    emit,
    final_answer,
    history_result_payload,
    history_turns,
    tool_body_sync,
    worker_main,
)

DURABILITY = "sync" if "--sync" in sys.argv else "async"
NAME = "langgraph_sync" if DURABILITY == "sync" else "langgraph"


class ScriptedChat(BaseChatModel):
    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self.bind(tools=tools, **kwargs)

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        SCRIPT.called()
        done = 0
        for m in reversed(messages):  # back to the last user message only
            if isinstance(m, HumanMessage):
                break
            done += isinstance(m, ToolMessage)
        if SCRIPT.wants_tool(done):
            call = {"name": "ping", "args": {"i": done}, "id": f"c{done}", "type": "tool_call"}
        else:
            call = {"name": "Answer", "args": final_answer(done), "id": "fin", "type": "tool_call"}
        message = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=message)])


@tool
def ping(i: int) -> str:
    """Answers at once."""
    return tool_body_sync(i)


class State(MessagesState):
    answer: dict[str, Any] | None


model = ScriptedChat().bind_tools([ping, Answer])


def agent_node(state: State) -> dict[str, Any]:
    message = model.invoke(state["messages"])
    update: dict[str, Any] = {"messages": [message]}
    for call in getattr(message, "tool_calls", []):
        if call["name"] == "Answer":  # the respond tool: the structured output
            update["answer"] = Answer(**call["args"]).model_dump()
    return update


def route(state: State) -> str:
    if state.get("answer") is not None:
        return END
    last = state["messages"][-1]
    return "tools" if getattr(last, "tool_calls", None) else END


def build(checkpointer: PostgresSaver) -> Any:
    graph = StateGraph(State)
    graph.add_node("agent", agent_node)
    graph.add_node("tools", ToolNode([ping]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", route, ["tools", END])
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=checkpointer)


def history_messages(count: int) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for kind, payload in history_turns(count):
        if kind == "user":
            out.append(HumanMessage(payload))
        elif kind == "call":
            call = {"name": "ping", "args": {"i": 0}, "id": payload, "type": "tool_call"}
            out.append(AIMessage(content="", tool_calls=[call]))
        elif kind == "result":
            out.append(ToolMessage(history_result_payload(), tool_call_id=payload))
        else:
            out.append(AIMessage(payload))
    return out


def config(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}, "recursion_limit": 10_000}


class LangGraph:
    name = NAME

    def __init__(self) -> None:
        self.conn: Connection[Any] | None = None
        self.graph: Any = None

    async def setup(self, database_url: str) -> None:
        self.conn = Connection.connect(
            database_url, autocommit=True, prepare_threshold=0, row_factory=dict_row
        )
        checkpointer = PostgresSaver(self.conn)  # type: ignore[arg-type]
        checkpointer.setup()
        self.graph = build(checkpointer)

    async def prepare(self, history: int) -> Any:
        thread_id = uuid.uuid4().hex
        if history:
            self.graph.update_state(config(thread_id), {"messages": history_messages(history)})
        return thread_id

    async def run(self, steps: int, prepared: Any) -> dict[str, Any]:
        state = self.graph.invoke(
            {"messages": [HumanMessage("go")]}, config(prepared), durability=DURABILITY
        )
        answer: dict[str, Any] = state["answer"]
        return answer

    async def shutdown(self) -> None:
        if self.conn is not None:
            self.conn.close()

    async def crash_start(self, database_url: str) -> str:
        await self.setup(database_url)
        thread_id = f"crash-{uuid.uuid4().hex[:8]}"
        emit({"started": thread_id})  # before the run: invoke() only returns at its end
        self.graph.invoke(
            {"messages": [HumanMessage("go")]}, config(thread_id), durability=DURABILITY
        )
        return thread_id

    async def crash_recover(self, database_url: str, run_id: str) -> dict[str, Any]:
        await self.setup(database_url)
        state = self.graph.invoke(None, config(run_id), durability=DURABILITY)
        note = "no automatic recovery: resumed by invoke(None) on the same thread_id"
        status = "completed" if state.get("answer") else "incomplete"
        return {"status": status, "output": state.get("answer"), "note": note}


if __name__ == "__main__":
    worker_main(LangGraph, [a for a in sys.argv[1:] if a != "--sync"])
