"""Routes: the Starlette app (``create_app``) and the HTTP routes it serves.

The app factory, the HTTP fallback routes (``/v1/sessions``), and the OpenEnv
dialect's HTTP, WebSocket and MCP routes; all of them hand frames to a
:mod:`~openenv_ws.server.session`. It may import every other part of the
server; nothing of the server imports it.
"""
