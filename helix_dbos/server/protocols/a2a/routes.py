"""The A2A routes: `/a2a/{agent}` (JSON-RPC 2.0, SSE for the streaming methods) and
`/a2a/{agent}/.well-known/agent-card.json`, both FastAPI routes, so they are in the
OpenAPI document and behind the same edge guard (bearer auth, body limits) as the rest.
The JSON-RPC work (parsing, method dispatch, errors in JSON-RPC's shape, SSE framing)
is the SDK's `JsonRpcDispatcher`; the methods are `HelixRequestHandler`'s."""

from __future__ import annotations

from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.types import AgentCard
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, VERSION_HEADER
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.requests import Request as StarletteRequest

from helix_dbos.server.http.route_context import ServerContext
from helix_dbos.server.protocols.a2a.card import agent_card
from helix_dbos.server.protocols.a2a.handler import PRINCIPAL, HelixRequestHandler

TAG = "a2a"
RPC_DESCRIPTION = (
    "A2A 1.0 JSON-RPC 2.0 endpoint of one agent (send the `A2A-Version: 1.0` header). "
    "Methods: `SendMessage`, `SendStreamingMessage` (SSE), `GetTask`, `ListTasks` (by "
    "`contextId`), `CancelTask`, `SubscribeToTask` (SSE). A task is a helix run (task id = "
    "run id, context id = session id). Errors are JSON-RPC error objects (HTTP 200), an "
    "unknown agent a 404 in the same shape. See docs/protocols/a2a.md."
)
RPC_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["jsonrpc", "method"],
                    "properties": {
                        "jsonrpc": {"type": "string", "enum": ["2.0"]},
                        "id": {"type": ["string", "integer", "null"]},
                        "method": {"type": "string", "examples": ["SendMessage"]},
                        "params": {"type": "object"},
                    },
                }
            }
        },
    },
    "parameters": [
        {"in": "header", "name": VERSION_HEADER, "required": True, "schema": {"type": "string"}}
    ],
}
RPC_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "A JSON-RPC response, or an SSE stream of them for the streaming methods",
        "content": {
            "application/json": {"schema": {"type": "object"}},
            "text/event-stream": {"schema": {"type": "string"}},
        },
    },
    404: {"description": "No such agent (a JSON-RPC error object)"},
}


class _ContextBuilder(DefaultServerCallContextBuilder):
    """The SDK's call context (headers, for the version check) plus helix's principal."""

    def build(self, request: StarletteRequest) -> ServerCallContext:
        context = super().build(request)
        context.state[PRINCIPAL] = getattr(request.state, PRINCIPAL, None)
        return context


def endpoint_url(request: Request, agent: str) -> str:
    return f"{str(request.base_url).rstrip('/')}/a2a/{agent}"


def build_router(ctx: ServerContext) -> APIRouter:
    router = APIRouter(tags=[TAG])
    helix = ctx.helix
    dispatchers: dict[str, JsonRpcDispatcher] = {}
    authenticated = ctx.authenticate is not None

    def card_for(request: Request, agent: str) -> AgentCard:
        return agent_card(
            helix.agents[agent], endpoint_url(request, agent), authenticated=authenticated
        )

    def unknown(agent: str, request_id: Any = None) -> JSONResponse:
        error = {"code": -32601, "message": f"No agent '{agent}' is served here"}
        return JSONResponse({"jsonrpc": "2.0", "id": request_id, "error": error}, status_code=404)

    @router.get(
        "/a2a/{agent}" + AGENT_CARD_WELL_KNOWN_PATH,
        summary="An agent's A2A agent card",
        responses={200: {"content": {"application/json": {"schema": {"type": "object"}}}}},
    )
    async def card(agent: str, request: Request) -> Response:
        if agent not in helix.agents:
            return unknown(agent)
        return JSONResponse(agent_card_to_dict(card_for(request, agent)))

    @router.post(
        "/a2a/{agent}",
        summary="An agent's A2A JSON-RPC endpoint",
        description=RPC_DESCRIPTION,
        openapi_extra=RPC_BODY,
        responses=RPC_RESPONSES,
    )
    async def rpc(agent: str, request: Request) -> Response:
        if agent not in helix.agents:
            return unknown(agent)
        dispatcher = dispatchers.get(agent)
        if dispatcher is None:
            handler = HelixRequestHandler(ctx, agent)
            dispatcher = dispatchers[agent] = JsonRpcDispatcher(
                handler, context_builder=_ContextBuilder()
            )
        return await dispatcher.handle_requests(request)

    return router
