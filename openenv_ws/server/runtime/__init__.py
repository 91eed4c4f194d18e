"""Runtime: what a server process provides its sessions, whatever they serve.

The worker threads that serve calls of environments that are not inline,
the warm pool of ready-built environments, the worker processes sharing a
port, and the process's metrics. It may import
:mod:`openenv_ws.server.limits` and :mod:`openenv_ws.server.transport`, never
a session or a route: a session uses the runtime, not the other way round.
"""
