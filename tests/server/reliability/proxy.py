"""A loopback TCP proxy whose connections the test cuts at chosen moments.

Clients connect to the proxy, the proxy to the server. Cutting resets both
TCP connections (SO_LINGER 0), as a network failure would: the client sees a
reset, the server a lost connection; neither gets a close frame. Cuts can be
timed against the traffic:

- :meth:`CutProxy.cut` now;
- :meth:`CutProxy.drop_next_request`: the next data from the client is
  swallowed, then the cut (the server never saw that request);
- :meth:`CutProxy.swallow_next_reply`: the next data from the server is
  swallowed, then the cut (the server served the request, the client never
  sees the reply).

WebSocket ping/pong frames pass through and never trigger a timed cut.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

__all__ = ["CutProxy"]

_CONTROL = {0x89, 0x8A}  # FIN + ping, FIN + pong


def _reset(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    # A pump blocked in recv() holds the socket open; SHUT_RD wakes it (sending
    # nothing), so the close right after really resets the connection.
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RD)
    with contextlib.suppress(OSError):
        sock.close()


class CutProxy:
    """Forward 127.0.0.1:<port> to `target_port`; cut connections on demand."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._armed: str | None = None  # "request" or "reply"
        self.cuts = 0
        self.timed_cut = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._accept, daemon=True, name="cut-proxy")
        self._thread.start()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target_port))
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._pairs.append((client, server))
            threading.Thread(
                target=self._pump, args=(client, server, "request"), daemon=True
            ).start()
            threading.Thread(target=self._pump, args=(server, client, "reply"), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, direction: str) -> None:
        while True:
            try:
                data = src.recv(1 << 16)
            except OSError:
                return
            if not data:
                if src.fileno() != -1:  # a real end of stream, not our cut
                    with contextlib.suppress(OSError):
                        dst.shutdown(socket.SHUT_WR)
                return
            with self._lock:
                fire = self._armed == direction and data[0] not in _CONTROL
                if fire:
                    self._armed = None
            if fire:
                self.cut()
                self.timed_cut.set()
                return
            try:
                dst.sendall(data)
            except OSError:
                return

    def cut(self) -> None:
        """Reset every connection through the proxy now."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
            self.cuts += 1
        for client, server in pairs:
            _reset(client)
            _reset(server)

    def drop_next_request(self) -> None:
        """Swallow the client's next request, then cut."""
        self.timed_cut.clear()
        with self._lock:
            self._armed = "request"

    def swallow_next_reply(self) -> None:
        """Let the next request through, swallow its reply, then cut."""
        self.timed_cut.clear()
        with self._lock:
            self._armed = "reply"

    def arm(self, how: str) -> None:
        """Cut now (``"between"`` requests) or at the next ``"request"`` or ``"reply"``."""
        if how == "between":
            self.cut()
        elif how == "request":
            self.drop_next_request()
        else:
            self.swallow_next_reply()

    def close(self) -> None:
        self._listener.close()
        self.cut()

    def __enter__(self) -> CutProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
