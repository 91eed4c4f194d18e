"""Session: one session of the server and its life, whatever transport carries it.

Serving a session's frames (a single environment or a vector of them, with
its serial stepping), admitting it against the process's limits, pacing
cold opens, calls under a deadline, replaying its last reply, resuming it on
a new connection, expiring what is left idle, the supervisor that links
sessions to connections, and the WebSocket connection loop. It may import
:mod:`openenv_ws.server.limits`, :mod:`openenv_ws.server.transport` and
:mod:`openenv_ws.server.runtime`, never a route.
"""
