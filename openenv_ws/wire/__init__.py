"""Protocol v1 without I/O: the only code that knows the bytes on the wire.

Bytes in, typed frames out, and back; nothing here touches a socket or an
event loop. ``protocol/SPEC.md`` is the normative description. One job a
module, each cheap to import on its own:

- :mod:`.limits`: the protocol version, the endpoint path and the size limits.
- :mod:`.codes`: the table of error codes (fatal or not, close code).
- :mod:`.frames`: the typed frames, client to server and back, each field
  declared once with its kind, whether it is required and its default.
- :mod:`.encode`: the reference encoder (canonical bytes of any frame).
- :mod:`.checks`: the kinds of field value and their checks (the decoder's schema).
- :mod:`.decode`: the reference decoder (bytes or a decoded map to a frame).
- :mod:`.native`: the step loop's frames through the C speedups where built.
- :mod:`.session`: the session state machine shared by server and clients.
- :mod:`.framing`: RFC 6455 frames for both ends of a connection.
- :mod:`.handshake`: the client's side of the WebSocket opening handshake.

:mod:`openenv_ws.protocol` gathers the public names of all but the framing and
the handshake.
"""
