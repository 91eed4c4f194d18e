"""Floods of control frames and peers that never read (issue 18, findings 2 and 3).

A peer that sends pings and reads nothing made the server queue pongs without
bound (1.6 GB in 46 s from one connection), and a close of such a peer
(heartbeat, idle, protocol) waited forever for it to read. A burst of tiny
control frames was served in one callback with a copy of the rest of the
buffer per frame, freezing every other session for seconds.

Now: nothing is read from a peer while what it is sent sits unread above the
transport's high-water mark; such a peer is aborted after ``--write-timeout``;
every close ends in an abort ``close_timeout`` (10 s) later if the peer does
not let it finish; pings and pongs beyond ``--control-frame-rate`` per second
close the connection with 1008. Each test floods a real ``openenv-ws serve``
from a raw socket while a neighbour session steps, then checks the server's
memory, ``/health`` and the neighbour.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time

import numpy as np

from openenv_ws.protocol import Result, Step, encode
from openenv_ws.testing import FakeEnvironment

from ..._rawwire import OP_CLOSE, OP_PING, OP_PONG, frame_bytes, masked, open_session, reply
from .conftest import MB, UNIT, HostileServer, Neighbour, RawWS, assert_contained, hostile_server

CLOSE_TIMEOUT = 10.0  # seconds: uvicorn's wait for a close to finish, then the abort
_TCP_CLOSE = 7  # tcp_info.tcpi_state of a connection that got a reset
PING = frame_bytes(OP_PING, b"p" * 125)  # the largest ping: a 127-byte pong each


def _flood_until_aborted(
    server: HostileServer, ws: RawWS, frame: bytes, within: float
) -> tuple[float | None, int]:
    """Send `frame` over and over, never reading, until the server aborts the connection.

    Returns the seconds until the connection was reset (None: not within
    `within` seconds) and the server's largest RSS seen meanwhile.
    """
    chunk = frame * max(1, (64 << 10) // len(frame))
    ws.sock.settimeout(0.05 * UNIT)
    start = time.monotonic()
    peak = server.rss()
    sampled = start
    while time.monotonic() - start < within:
        try:
            ws.sock.send(chunk)
        except TimeoutError:
            pass  # the server is not reading: keep trying
        except OSError:
            return time.monotonic() - start, max(peak, server.rss())
        if time.monotonic() - sampled > 0.1:
            peak, sampled = max(peak, server.rss()), time.monotonic()
    return None, peak


def _reset_by_server(ws: RawWS) -> bool:
    """Whether the server reset the connection (seen without reading what is buffered)."""
    return ws.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] == _TCP_CLOSE


def _close_frame(ws: RawWS, within: float) -> tuple[int | None, str, int]:
    """Read until the server's close frame: (code or None, reason, pongs received before it)."""
    pongs = 0
    deadline = time.monotonic() + within
    while True:
        try:
            opcode, payload = ws.read_frame(max(0.0, deadline - time.monotonic()))
        except (EOFError, OSError):
            return None, "", pongs
        if opcode == OP_PONG:
            pongs += 1
        elif opcode == OP_CLOSE:
            code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
            return code, payload[2:].decode(errors="replace"), pongs


def test_a_ping_flood_that_never_reads_is_closed_and_then_aborted() -> None:
    """Defaults: the rate limit closes the flood at once; the close, never read, ends in an abort."""
    with hostile_server() as server, Neighbour(server) as neighbour, server.raw() as ws:
        rss = server.rss()
        aborted, peak = _flood_until_aborted(server, ws, PING, CLOSE_TIMEOUT + 20 * UNIT)
        assert aborted is not None, (
            f"the connection of a peer that never reads was not aborted within "
            f"{CLOSE_TIMEOUT + 20 * UNIT:g} s (server RSS grew {(peak - rss) / MB:.0f} MB)"
        )
        assert peak - rss <= 50 * MB, f"server RSS grew {(peak - rss) / MB:.0f} MB"
        assert_contained(server, neighbour, rss_before=rss)


def test_without_a_rate_limit_a_peer_that_never_reads_is_aborted_after_the_write_timeout() -> None:
    """Pings are answered, but not read from a peer that leaves the pongs unread."""
    timeout = 2 * UNIT
    flags = ("--control-frame-rate", "0", "--write-timeout", f"{timeout:g}")
    with hostile_server(*flags) as server, Neighbour(server) as neighbour, server.raw() as ws:
        rss = server.rss()
        aborted, peak = _flood_until_aborted(server, ws, PING, timeout + 20 * UNIT)
        assert aborted is not None, (
            f"not aborted within {timeout + 20 * UNIT:g} s of a {timeout:g} s write timeout "
            f"(server RSS grew {(peak - rss) / MB:.0f} MB)"
        )
        assert aborted >= timeout, f"aborted after {aborted:.1f} s, before the write timeout"
        assert peak - rss <= 50 * MB, f"server RSS grew {(peak - rss) / MB:.0f} MB"
        assert_contained(server, neighbour, rss_before=rss)


def test_a_peer_that_stops_reading_is_aborted_after_the_heartbeat_closes_it() -> None:
    """Pipelined steps fill the server's buffers; the heartbeat close is never read; abort."""
    beat = 1 * UNIT
    flags = ("--ping-interval", f"{beat:g}", "--ping-timeout", f"{beat:g}")
    with hostile_server(*flags) as server, Neighbour(server) as neighbour, server.raw() as ws:
        rss = server.rss()
        open_session(ws, {"obs_shape": [256, 256, 3], "episode_length": 100_000})
        ws.sock.settimeout(0.05 * UNIT)
        requests = b"".join(masked(encode(Step(id=10 + i, action=0))) for i in range(200))
        for _ in range(50):  # 10,000 steps of 196 KB observations: far past every buffer
            try:
                ws.sock.sendall(requests)
            except TimeoutError:
                break  # the server stopped reading from us
        bound = 2 * beat + CLOSE_TIMEOUT + 20 * UNIT
        start = time.monotonic()
        while not _reset_by_server(ws) and time.monotonic() - start < bound:
            time.sleep(0.05)
        assert _reset_by_server(ws), f"the connection was not aborted within {bound:g} s"
        assert_contained(server, neighbour, rss_before=rss)


def test_a_burst_of_tiny_pongs_is_closed_by_the_rate_limit_while_the_neighbour_steps() -> None:
    """4 MiB of 6-byte pongs in one write: the neighbour steps during it; the flooder gets 1008."""
    burst = frame_bytes(OP_PONG, b"") * ((4 * MB) // 6)
    with hostile_server() as server, Neighbour(server) as neighbour, server.raw() as ws:
        rss = server.rss()

        def flood() -> None:
            with contextlib.suppress(OSError):  # closed under it: expected
                ws.sock.sendall(burst)

        sender = threading.Thread(target=flood, daemon=True)
        sender.start()
        neighbour.check()
        code, reason, _ = _close_frame(ws, 10 * UNIT)
        assert code == 1008, (code, reason)
        assert "pings and pongs per second" in reason, reason
        sender.join(10 * UNIT)
        assert_contained(server, neighbour, rss_before=rss)


def test_a_ping_flood_that_reads_its_pongs_is_closed_by_the_rate_limit() -> None:
    rate = 50
    with hostile_server("--control-frame-rate", str(rate)) as server, server.raw() as ws:
        ws.send_raw(PING * (4 * rate))
        code, reason, pongs = _close_frame(ws, 10 * UNIT)
        assert code == 1008, (code, reason, pongs)
        assert f"more than {rate} pings and pongs per second" in reason, reason
        assert rate <= pongs < 2 * rate, pongs  # the burst allowed, then the close
        server.health()


def test_pings_within_the_rate_are_answered_in_order_between_steps() -> None:
    """The limit leaves room for any honest use: a burst of pings among steps is served."""
    local = FakeEnvironment({})
    local.reset(seed=0)
    expected = local.step(1).obs
    with hostile_server() as server, server.raw() as ws:
        open_session(ws, {})
        pings = b"".join(frame_bytes(OP_PING, str(i).encode()) for i in range(60))
        ws.send_raw(pings + masked(encode(Step(id=7, action=1))))
        payloads = []
        for _ in range(60):
            opcode, payload = ws.read_frame(10 * UNIT)
            assert opcode == OP_PONG, (opcode, payload)
            payloads.append(payload)
        assert payloads == [str(i).encode() for i in range(60)]
        result = reply(ws)
        assert isinstance(result, Result) and result.id == 7, result
        assert np.array_equal(result.obs, expected)
