"""The protocol version, the session endpoint's path and the size limits of protocol v1."""

from __future__ import annotations

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "DEFAULT_MAX_SERVER_FRAME_SIZE",
    "MAX_CODECS",
    "MAX_CODEC_NAME",
    "MAX_DEPTH",
    "MAX_ERROR_MESSAGE",
    "MAX_ID",
    "MAX_NUM_ENVS",
    "MAX_SPEC_DEPTH",
    "PROTOCOL_VERSION",
    "SUPPORTED_VERSIONS",
    "WS_PATH",
]

PROTOCOL_VERSION = 1
SUPPORTED_VERSIONS: tuple[int, ...] = (1,)
#: Path of the session WebSocket endpoint.
WS_PATH = "/ws"
#: Largest client frame a server accepts unless configured otherwise (1 MiB).
DEFAULT_MAX_FRAME_SIZE = 1 << 20
#: Largest server frame a client accepts unless configured otherwise (64 MiB).
DEFAULT_MAX_SERVER_FRAME_SIZE = 64 << 20
#: Request ids are unsigned 32-bit integers.
MAX_ID = 0xFFFFFFFF
#: How many levels of lists/maps a free-form value (config, options, action,
#: spec, info, state) may nest, the value itself counting as level 1.
MAX_DEPTH = 8
#: How many levels of lists/maps the ``spec`` of an ``opened`` frame may nest:
#: each Dict or Tuple space takes two, a JSON Schema several (SPEC section 22).
MAX_SPEC_DEPTH = 32
#: Longest error message a server sends, in characters; longer ones are cut.
MAX_ERROR_MESSAGE = 1000
#: Most codec names an ``open`` may list in ``compress``.
MAX_CODECS = 16
#: Longest codec name, in characters (``open``'s ``compress``, ``opened``'s ``compress``).
MAX_CODEC_NAME = 32
#: Most envs one vector session may hold on the wire (``open``'s ``num_envs``);
#: a server's own limit (``serve --max-envs``) is usually far lower.
MAX_NUM_ENVS = 65536
