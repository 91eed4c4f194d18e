"""Protocol v1 requests over a raw WebSocket, for the session-level attacks."""

from __future__ import annotations

from typing import Any

from openenv_ws.protocol import Error, Open, Reset, Step, decode_server_frame, encode
from openenv_ws.wire.framing import OP_BINARY, OP_CLOSE, parse_close, serialize

from .conftest import UNIT, RawWS

__all__ = ["masked", "open_session", "reply", "request"]


def masked(payload: bytes) -> bytes:
    """A final, masked binary frame carrying `payload`."""
    return serialize(OP_BINARY, payload, mask=True)


def reply(ws: RawWS, *, timeout: float = 10.0) -> Any:
    """The next protocol frame from the server (control frames skipped), decoded.

    Raises AssertionError on a close frame (naming its code) and TimeoutError
    when nothing comes within `timeout` units.
    """
    while True:
        opcode, payload = ws.read_frame(timeout * UNIT)
        if opcode == OP_BINARY:
            return decode_server_frame(payload)
        if opcode == OP_CLOSE:
            code = parse_close(payload)[0] if payload else None
            raise AssertionError(f"the server closed the connection ({code})")


def request(ws: RawWS, frame: Any, *, timeout: float = 10.0) -> Any:
    """Send `frame` and return the server's reply frame."""
    ws.send_raw(masked(encode(frame)))
    return reply(ws, timeout=timeout)


def open_session(ws: RawWS, config: dict[str, Any], *, reset: bool = True) -> None:
    """Open (and reset) a session on `ws`, failing the test if the server refuses."""
    opened = request(ws, Open(id=1, config=config))
    assert not isinstance(opened, Error), opened
    if reset:
        result = request(ws, Reset(id=2, seed=0))
        assert not isinstance(result, Error), result


def step(rid: int, action: Any = 0) -> Step:
    return Step(id=rid, action=action)
