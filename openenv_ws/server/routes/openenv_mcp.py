"""OpenEnv's ``POST /mcp``: MCP JSON-RPC (``tools/list``, ``tools/call``) as openenv-core's
server answers it, over the same sessions as OpenEnv's HTTP routes.

A tool request becomes one ``step`` of a session with OpenEnv's own MCP
actions (``{"type": "list_tools"}``, ``{"type": "call_tool", "tool_name",
"arguments"}``), so it runs where every call of that session runs (its worker
thread, its event loop, the per-call deadline) under the same limits (body
size, JSON depth, session limits). ``params.session_id`` names a session made
by ``openenv/session/create`` (ended by ``openenv/session/close`` or the HTTP
session TTL); without one, the request gets a session of its own, closed after
the reply. Replies are JSON-RPC 2.0 objects, errors with the standard codes.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...errors import OpenEnvError
from ...jsonview import MAX_JSON_DEPTH
from ...openenv_dialect import dumps
from ...protocol import Error
from .fallback import JSON, http_status, read_body
from .openenv_compat import OpenEnvCompat, OpenEnvSession, reply_data

__all__ = ["OpenEnvMCP", "json_depth"]

# JSON-RPC 2.0 error codes, as openenv-core's server uses them.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
SERVER_ERROR = -32000
_TITLES = {
    PARSE_ERROR: "Parse error",
    INVALID_REQUEST: "Invalid Request",
    METHOD_NOT_FOUND: "Method not found",
    INVALID_PARAMS: "Invalid params",
    INTERNAL_ERROR: "Internal error",
    SERVER_ERROR: "Server error",
}
_REQUEST_KEYS = frozenset({"jsonrpc", "method", "params", "id"})
_TOOLS = ("tools/list", "tools/call")


class _Refused(Exception):
    """A JSON-RPC error reply."""

    def __init__(self, code: int, message: str, status: int = 200) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


def json_depth(value: Any) -> int:
    """How deeply `value` nests lists and objects (0 for a scalar), without recursion."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if type(item) is dict:
            children: Any = item.values()
        elif type(item) is list:
            children = item
        else:
            continue
        deepest = max(deepest, level)
        if deepest > MAX_JSON_DEPTH:
            return deepest
        stack.extend((child, level + 1) for child in children)
    return deepest


class OpenEnvMCP:
    """``POST /mcp`` for the OpenEnv dialect of one server (`compat`)."""

    def __init__(self, compat: OpenEnvCompat) -> None:
        self.compat = compat

    def route(self) -> Route:
        """``POST /mcp``."""
        return Route("/mcp", self.endpoint, methods=["POST"])

    async def endpoint(self, request: Request) -> Response:
        rid: Any = None
        try:
            message = await self._message(request)
            rid = message.get("id")
            result = await self._serve(request, message["method"], message.get("params", {}))
        except _Refused as refused:
            return _reply(rid, error=(refused.code, str(refused)), status=refused.status)
        return _reply(rid, result=result)

    async def _message(self, request: Request) -> dict[str, Any]:
        store = self.compat.store
        try:
            body = await read_body(request, store.max_frame_size)
        except OpenEnvError as exc:
            raise _Refused(INVALID_REQUEST, str(exc), http_status(exc.code)) from None
        try:
            message = json.loads(body)
        except (ValueError, RecursionError):
            raise _Refused(PARSE_ERROR, "Parse error") from None
        if json_depth(message) > MAX_JSON_DEPTH:
            raise _Refused(
                INVALID_REQUEST,
                f"Invalid request: the body nests lists/objects deeper than {MAX_JSON_DEPTH} "
                "levels",
            )
        if type(message) is not dict:
            raise _Refused(INVALID_REQUEST, "Invalid request: not a JSON-RPC 2.0 object")
        extra = sorted(str(k)[:40] for k in message.keys() - _REQUEST_KEYS)[:4]
        rid = message.get("id")
        problems = [f"unknown key {k!r}" for k in extra]
        if message.get("jsonrpc") != "2.0":
            problems.append("'jsonrpc' must be '2.0'")
        if type(message.get("method")) is not str:
            problems.append("'method' must be a string")
        if type(message.get("params", {})) is not dict:
            problems.append("'params' must be an object")
        if rid is not None and type(rid) not in (str, int):
            problems.append("'id' must be a string, an integer or null")
        if problems:
            raise _Refused(INVALID_REQUEST, "Invalid request: " + "; ".join(problems))
        return message

    async def _serve(self, request: Request, method: str, params: dict[str, Any]) -> Any:
        store = self.compat.store
        if method == "openenv/session/create":
            client = await self._open(request)
            store.add(client.session, client.spec or {})
            return {"session_id": client.session.session_id}
        if method == "openenv/session/close":
            session_id = params.get("session_id")
            if not session_id or type(session_id) is not str:
                raise _Refused(INVALID_PARAMS, "Invalid params - 'session_id' is required")
            if store.get(session_id) is None:
                raise _Refused(INVALID_PARAMS, f"Unknown session_id: {session_id[:80]}")
            store.drop(session_id)
            return {"session_id": session_id, "closed": True}
        if method not in _TOOLS:
            raise _Refused(METHOD_NOT_FOUND, f"Method not found: {method[:80]}")
        if method == "tools/call":
            name = params.get("name")
            if not name or type(name) is not str:
                raise _Refused(INVALID_PARAMS, "Missing 'name' in params")
            arguments = params.get("arguments", {})
            action: dict[str, Any] = {
                "type": "call_tool",
                "tool_name": name,
                "arguments": arguments,
            }
        else:
            action = {"type": "list_tools"}
        session_id = params.get("session_id")
        if session_id:
            entry = store.get(session_id) if type(session_id) is str else None
            if entry is None:
                raise _Refused(INVALID_PARAMS, f"Unknown session_id: {str(session_id)[:80]}")
            return await self._tool(OpenEnvSession(entry.session, entry.spec), action)
        client = await self._open(request)
        try:
            return await self._tool(client, action)
        finally:
            client.session.close()

    async def _open(self, request: Request) -> OpenEnvSession:
        """A new session with its episode begun (openenv-core's sessions need no reset)."""
        store = self.compat.store
        peer = request.client.host if request.client is not None else None
        client = OpenEnvSession(store.new_session(peer))
        error = await client.open(store, self.compat.config, peer)
        if error is None:
            frame, _ = await client.request(store, "reset", {})
            error = frame if isinstance(frame, Error) else None
        if error is not None:
            client.session.close()
            raise _Refused(SERVER_ERROR, error.message)
        return client

    async def _tool(self, client: OpenEnvSession, action: dict[str, Any]) -> Any:
        frame, close = await client.request(self.compat.store, "step", action)
        if close is not None:
            self.compat.store.drop(client.session.session_id)
        if isinstance(frame, Error):
            raise _Refused(INTERNAL_ERROR, frame.message)
        try:
            obs = reply_data(frame, client.legal, model=client.model_obs)["observation"]
        except OpenEnvError as exc:
            raise _Refused(INTERNAL_ERROR, str(exc)) from None
        if type(obs) is not dict:
            raise _Refused(INTERNAL_ERROR, "Environment does not support MCP")
        error = obs.get("error")
        if error:
            message = error.get("message") if type(error) is dict else error
            raise _Refused(INTERNAL_ERROR, str(message))
        if action["type"] == "list_tools":
            if type(obs.get("tools")) is not list:
                raise _Refused(INTERNAL_ERROR, "Environment does not support MCP")
            return {"tools": [_tool_entry(tool) for tool in obs["tools"]]}
        if "result" not in obs:
            raise _Refused(INTERNAL_ERROR, "Environment does not support MCP")
        return obs["result"]


def _tool_entry(tool: Any) -> Any:
    """A tool of a ``list_tools`` observation with the fields openenv-core's ``/mcp`` gives
    (its MCP SDK's names)."""
    if type(tool) is not dict:
        return tool
    return {
        "name": tool.get("name", ""),
        "description": tool.get("description") or "",
        "input_schema": tool.get("input_schema", tool.get("inputSchema")) or {},
    }


def _reply(
    rid: Any, *, result: Any = None, error: tuple[int, str] | None = None, status: int = 200
) -> Response:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": rid if type(rid) in (str, int) else None}
    if error is not None:
        code, message = error
        body["error"] = {"code": code, "message": message or _TITLES[code], "data": None}
    else:
        body["result"] = result
    return Response(dumps(body), status, media_type=JSON)
