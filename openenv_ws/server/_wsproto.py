"""uvicorn's sans-I/O WebSocket protocol, minus a read pause per message.

uvicorn pauses reading the socket after queueing every message and resumes
on the app's next ``receive()``: two event-loop registrations (epoll_ctl or
io_uring calls) per request, on every step. A session serves one request at
a time, so the queue is almost always empty; reading pauses here only when
the app falls behind by ``MAX_QUEUED`` messages, which still bounds the
memory a pipelining client can make the server hold.
"""

from __future__ import annotations

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

__all__ = ["MAX_QUEUED", "LeanWebSocketProtocol"]

#: Messages queued for the app before the server stops reading the socket.
MAX_QUEUED = 64


class LeanWebSocketProtocol(WebSocketsSansIOProtocol):
    """``websockets-sansio`` with backpressure only when the app falls behind."""

    def send_receive_event_to_app(self) -> None:
        paused = self.read_paused
        # The parent pauses unless reading is already paused; let it think so.
        self.read_paused = True
        try:
            super().send_receive_event_to_app()
        finally:
            self.read_paused = paused
        if not paused and self.queue.qsize() >= MAX_QUEUED:
            self.read_paused = True
            self.transport.pause_reading()
