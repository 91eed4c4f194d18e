"""Raw protocol v1 frames over a ``websockets`` connection, for the vector-session tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from websockets.sync.client import ClientConnection, connect

from openenv_ws.protocol import Error, decode_server_frame, encode, ext_hook

from ...conftest import UNIT

__all__ = ["Wire", "wire"]


class Wire:
    """One connection: send a frame, read the reply (arrays through `hook`)."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.hook: Callable[[int, bytes], Any] = ext_hook

    def ask(self, frame: Any) -> Any:
        self.ws.send(encode(frame))
        return self.read()

    def read(self) -> Any:
        data = self.ws.recv(timeout=30 * UNIT)
        assert isinstance(data, bytes), data
        return decode_server_frame(data, max_frame_size=1 << 30, ext_hook=self.hook)

    def ok(self, frame: Any) -> Any:
        """`ask`, failing the test on an error reply."""
        got = self.ask(frame)
        assert not isinstance(got, Error), got
        return got


@contextmanager
def wire(url: str, headers: dict[str, str] | None = None) -> Iterator[Wire]:
    with connect(url, additional_headers=headers, max_size=1 << 30, open_timeout=30 * UNIT) as ws:
        yield Wire(ws)
