"""Transport: what arrives on a socket before it reaches a route.

uvicorn's protocols as this server runs them (the WebSocket protocol that
frames binary messages inline, the HTTP protocol that guards connections, the
accept loop that bounds TLS handshakes), the ASGI middleware that checks the
host, origin and token of every request, and running and draining uvicorn.
It works on uvicorn's internals (tests/server/test_dependency_internals.py
pins them). It may import :mod:`openenv_ws.server.limits` and openenv_ws's
own top-level modules (``openenv_ws.wire``, ...), nothing of the server's other
sub-packages: the app it serves is any ASGI app.
"""
