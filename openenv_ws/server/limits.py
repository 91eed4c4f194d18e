"""The one settings object of a server process: its limits, checked when made.

:class:`ServerLimits` holds every limit and setting of a server process, from
the sessions it hosts to the uvicorn protocols that carry them; each field is
declared with its default, its check and its ``openenv-ws serve`` flag (see
:class:`Flag`), and ``openenv-ws serve``'s flags are generated from them. A new
limit is a field here, its check, and its test.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any

from ..footprint import default_memory_budget, default_thread_budget
from ..protocol import DEFAULT_MAX_FRAME_SIZE
from ..wire.compress import CODECS, available_codecs

__all__ = [
    "DEFAULT_CONTROL_RATE",
    "DEFAULT_HANDSHAKE_TIMEOUT",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_CONNECTIONS_PER_PEER",
    "DEFAULT_MAX_HEAD_SIZE",
    "DEFAULT_WRITE_TIMEOUT",
    "MAX_BUSY_POLL",
    "Flag",
    "ServerLimits",
    "SettingError",
    "setting_problem",
]

#: Connections a server process holds at once (lowered to fit the file descriptor limit).
DEFAULT_MAX_CONNECTIONS = 4096
#: Connections one client address holds at once.
DEFAULT_MAX_CONNECTIONS_PER_PEER = 1024
#: Seconds a connection has to complete its request and handshake.
DEFAULT_HANDSHAKE_TIMEOUT = 10.0
#: Bytes of one request head (request line and headers).
DEFAULT_MAX_HEAD_SIZE = 1 << 16
#: Seconds a WebSocket peer may read nothing before its connection is aborted.
DEFAULT_WRITE_TIMEOUT = 30.0
#: Pings and pongs a WebSocket peer may send per second.
DEFAULT_CONTROL_RATE = 100.0
#: Longest busy-poll window accepted, in seconds.
MAX_BUSY_POLL = 10.0

Check = Callable[[Any], "str | None"]


class SettingError(ValueError):
    """A setting out of range: :attr:`name` is the field, :attr:`problem` says what is
    wrong (``"must be at least 1, got 0"``)."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"ServerLimits.{name} {problem}")
        self.name = name
        self.problem = problem


@dataclass(frozen=True, slots=True)
class Flag:
    """How a field of :class:`ServerLimits` is given to ``openenv-ws serve``.

    Attributes:
        help: the flag's help text.
        name: the flag (default: ``--`` and the field's name with dashes).
        parse: turns the flag's text into the field's value (default: the
            type of the field's default, int or float).
        metavar: the value's name in the help.
        zero_is_none: 0 on the command line stands for None (no limit).
    """

    help: str
    name: str | None = None
    parse: Callable[[str], Any] | None = None
    metavar: str | None = None
    zero_is_none: bool = False


def at_least(low: float) -> Check:
    """A check that a number (None: no limit) is at least `low`."""

    def check(value: Any) -> str | None:
        if value is None or value >= low:
            return None
        return f"must be at least {low:g}, got {value}"

    return check


def above(low: float, unit: str = "") -> Check:
    """A check that a number (None: no limit) is above `low` (NaN is not)."""

    def check(value: Any) -> str | None:
        if value is None or value > low:
            return None
        return f"must be above {low:g}{unit}, got {value}"

    return check


def between(low: float, high: float, text: str) -> Check:
    """A check that a number is in ``[low, high]``; `text` says so in the error."""

    def check(value: Any) -> str | None:
        if low <= value <= high:
            return None
        return f"must be {text}, got {value}"

    return check


def share(value: Any) -> str | None:
    """The check of a share of time: in (0, 1]."""
    if 0 < value <= 1:
        return None
    return f"must be in (0, 1] (1: no pacing), got {value}"


def known_codecs(value: Any) -> str | None:
    """The check of a list of compression codecs: each one known to the protocol."""
    unknown = [name for name in value if name not in CODECS]
    if not unknown:
        return None
    return f"names codecs the protocol does not know: {', '.join(unknown)} (known: {', '.join(CODECS)})"


def parse_codecs(text: str) -> tuple[str, ...]:
    """``--compression``: codec names, comma-separated, or ``none``."""
    if text.strip().lower() == "none":
        return ()
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    have = available_codecs()
    for name in names:
        if name not in have:
            raise argparse.ArgumentTypeError(
                f"unknown codec {name!r}; use a comma-separated list of {', '.join(have)}, or none"
            )
    return names


def parse_byte_size(text: str) -> int:
    """``--memory-budget``: bytes, with an optional K, M, G or T suffix (powers of 1024)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    body = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = units.get(body[-1:], 1)
    try:
        value = float(body[:-1] if body[-1:] in units else body) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a size in bytes such as 8G or 512M, got {text!r}"
        ) from None
    if not 0 < value < 1 << 60:
        raise argparse.ArgumentTypeError(f"expected a positive size, got {text!r}")
    return int(value)


def setting(
    default: Any = MISSING,
    *,
    check: Check | None = None,
    flag: Flag,
    factory: Callable[[], Any] | None = None,
) -> Any:
    """A field of :class:`ServerLimits`: its default (or `factory`), its check, its flag."""
    metadata = {"check": check, "flag": flag}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def _cpu_count() -> int:
    return os.cpu_count() or 1


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """The limits and settings of one server process, checked when made.

    Every field is declared once, here, with its check and its ``openenv-ws
    serve`` flag (:class:`Flag`); the command line is generated from them.
    A value out of range raises :class:`SettingError` naming the field.

    Attributes:
        max_sessions: sessions hosted at once; the next ``open`` gets ``capacity``.
            Each env of a vector session counts as a session.
        max_envs: the most envs one vector session may hold (SPEC section 21);
            an ``open`` with more gets ``bad_config``.
        max_frame_size: largest request frame in bytes (larger: close 1009).
        idle_timeout: seconds a connection may go without sending a request
            before the server closes it (``idle_timeout``, close 1001); None: never.
        resume_grace: seconds a session whose connection dropped waits for its
            client to resume it; 0 or None: sessions end with their connection.
        drain_timeout: seconds a draining server waits for replies still being
            written before it closes what is left.
        http_session_ttl: seconds an HTTP session (fallback routes or OpenEnv's
            HTTP routes) may go without a request before it is closed; None: never.
        step_timeout: seconds one call of an environment that is not inline
            (:attr:`~openenv_ws.environment.Environment.inline`) may take; a call
            past it ends its session with ``step_timeout``; so does a build off
            the event loop (``EnvPlugin.build_off_loop``). None: no deadline.
        cold_open_share: the largest fraction of time spent building
            environments for opens the warm pool cannot serve (they hold the
            GIL); the next such open waits its turn (1: no pacing). Also paces
            the warm pool's background builds.
        cold_open_queue: opens that may wait for their turn to build at once;
            the next gets ``capacity`` (close 1013).
        open_timeout: seconds a WebSocket connection may go without opening a
            session before the server closes it (``idle_timeout``, close 1001,
            the reason naming the open timeout); None: never.
        compression: codecs observations sent inline may be compressed with,
            preferred first, for clients that offer them (SPEC section 19);
            empty: never compress.
        memory_budget: bytes the sessions of the process may take together,
            each charged its footprint (``EnvPlugin.footprint``, computed from
            its config before anything is built); an ``open`` past it gets
            ``capacity`` naming the budget. Default: half of physical memory.
        max_engine_threads: threads the sessions' engines may start together
            (a vector session's C++ threads); past it, ``capacity``.
            Default: 32 per core (three 64-env Atari sessions on 2 cores).
        max_stuck_calls: environment calls past ``step_timeout`` that may still
            run (a Python thread cannot be stopped): their sessions leave the
            session count at the deadline, but their memory and threads stay
            charged until the call returns, and while this many run the
            server opens no session (``capacity``). Default: one per core.
        max_sessions_per_peer: sessions (weighed as for ``max_sessions``) one
            client address may hold at once, WebSocket and HTTP together; the
            next ``open`` from it gets ``capacity``. None: a quarter of
            ``max_sessions``, and never less than two vector sessions of
            ``max_envs`` (a client may hold one beside a few others; see
            :attr:`peer_quota`).
        http_unused_ttl: seconds an HTTP session may wait for its first request
            after the one that opened it before it is closed (an open nobody
            uses); None: only ``http_session_ttl`` applies.
        max_connections: connections the process holds at once (uvicorn's
            connection guard); None: no limit.
        max_connections_per_peer: connections one client address holds at once.
        handshake_timeout: seconds a connection has to send its request and
            complete its (TLS and) WebSocket handshake; None: no limit.
        max_head_size: bytes of one request head; larger: HTTP 431. None: no limit.
        ping_interval: seconds between WebSocket pings to each client; None: no heartbeat.
        ping_timeout: seconds to wait for a pong before dropping the connection.
        write_timeout: seconds a WebSocket peer may read nothing of what it is
            sent before its connection is aborted; None: never.
        control_rate: pings and pongs a peer may send per second before it is
            closed with 1008; None: no limit.
        busy_poll: seconds the event loop keeps polling without sleeping after
            each WebSocket message (0: off); for a server with a core of its own.
    """

    max_sessions: int = setting(
        1024,
        check=at_least(1),
        flag=Flag(
            "sessions hosted at once by each server process; the next open gets 'capacity' "
            "(each env of a vector session counts as one)"
        ),
    )
    max_sessions_per_peer: int | None = setting(
        None,
        check=at_least(1),
        flag=Flag(
            "sessions one client address may hold at once, WebSocket and HTTP together "
            "(counted as --max-sessions); the next open from it gets 'capacity' (default: a "
            "quarter of --max-sessions, at least twice --max-envs)",
            parse=int,
            metavar="N",
        ),
    )
    max_envs: int = setting(
        64,
        check=at_least(1),
        flag=Flag(
            "most envs one vector session (open with num_envs) may hold; more gets 'bad_config'"
        ),
    )
    max_frame_size: int = setting(
        DEFAULT_MAX_FRAME_SIZE,
        check=at_least(1),
        flag=Flag("largest request frame in bytes"),
    )
    memory_budget: int = setting(
        factory=default_memory_budget,
        check=at_least(1),
        flag=Flag(
            "memory the sessions of the server may take together (e.g. 8G, 512M), each "
            "charged what its config needs before it is built; over it, 'capacity' "
            "(default: half of physical memory, split between the workers)",
            parse=parse_byte_size,
            metavar="BYTES",
        ),
    )
    max_engine_threads: int = setting(
        factory=default_thread_budget,
        check=at_least(0),
        flag=Flag(
            "threads the sessions' engines (vector sessions) may start together, per "
            "process; over it, 'capacity' (default: 32 per core)",
            parse=int,
        ),
    )
    max_stuck_calls: int = setting(
        factory=_cpu_count,
        check=at_least(1),
        flag=Flag(
            "environment calls past --step-timeout that may still run (threads cannot be "
            "stopped); while this many run, opens get 'capacity' (default: one per core)",
            parse=int,
        ),
    )
    http_session_ttl: float | None = setting(
        300.0,
        check=above(0),
        flag=Flag(
            "close HTTP sessions (fallback and OpenEnv routes) idle this many seconds (0: never)",
            zero_is_none=True,
        ),
    )
    http_unused_ttl: float | None = setting(
        30.0,
        check=above(0),
        flag=Flag(
            "close HTTP sessions that get no request after the one that opened them within "
            "this many seconds (0: only --http-session-ttl; default 30)",
            metavar="SECONDS",
            zero_is_none=True,
        ),
    )
    max_connections: int | None = setting(
        DEFAULT_MAX_CONNECTIONS,
        check=at_least(1),
        flag=Flag(
            "connections a server process holds at once (lowered to fit the file descriptor "
            "limit); beyond it a connection still sending its request is dropped to make room, "
            "else the newcomer gets HTTP 503 (default 4096)"
        ),
    )
    max_connections_per_peer: int | None = setting(
        DEFAULT_MAX_CONNECTIONS_PER_PEER,
        check=at_least(1),
        flag=Flag(
            "connections one client address holds at once, as --max-connections (default 1024)"
        ),
    )
    handshake_timeout: float | None = setting(
        DEFAULT_HANDSHAKE_TIMEOUT,
        check=above(0),
        flag=Flag(
            "seconds a connection has to send its request and complete a WebSocket "
            "handshake before it is dropped (0: no limit; default 10)",
            zero_is_none=True,
        ),
    )
    max_head_size: int | None = setting(
        DEFAULT_MAX_HEAD_SIZE,
        check=at_least(1),
        flag=Flag(
            "bytes of one request head (request line and headers); a larger one is answered "
            "HTTP 431 and its connection closed (0: no limit; default 65536)",
            zero_is_none=True,
        ),
    )
    compression: tuple[str, ...] = setting(
        ("zstd", "lz4"),
        check=known_codecs,
        flag=Flag(
            "compress the observations sent inline (not those in shared memory) for clients "
            "that offer it, with the first codec of this list the client offers: comma-"
            f"separated, of {', '.join(available_codecs())}; 'none' never compresses "
            "(default zstd,lz4)",
            parse=parse_codecs,
            metavar="CODECS",
        ),
    )
    open_timeout: float | None = setting(
        60.0,
        check=above(0),
        flag=Flag(
            "close WebSocket connections that open no session within this many seconds "
            "(0: never; default 60)",
            zero_is_none=True,
        ),
    )
    idle_timeout: float | None = setting(
        600.0,
        check=above(0),
        flag=Flag(
            "close connections that send no request for this many seconds (0: never)",
            zero_is_none=True,
        ),
    )
    resume_grace: float | None = setting(
        30.0,
        check=at_least(0),
        flag=Flag(
            "seconds a session whose connection dropped waits to be resumed (0: no resume)",
            name="--grace",
        ),
    )
    ping_interval: float | None = setting(
        20.0,
        check=above(0),
        flag=Flag(
            "seconds between WebSocket pings to each client (0: no heartbeat)",
            zero_is_none=True,
        ),
    )
    ping_timeout: float | None = setting(
        20.0,
        check=above(0),
        flag=Flag("seconds to wait for a pong before dropping the connection", zero_is_none=True),
    )
    drain_timeout: float = setting(
        10.0,
        check=at_least(0),
        flag=Flag(
            "on SIGTERM, seconds to let in-flight replies finish before closing what is left"
        ),
    )
    step_timeout: float | None = setting(
        60.0,
        check=above(0),
        flag=Flag(
            "deadline of one call of an environment whose calls are not bounded (not "
            "inline; served on a thread of its session), and of a build off the event loop "
            "(gymnasium, openenv, module:factory): past it the session ends with "
            "step_timeout (0: no deadline; Atari is always served inline)",
            metavar="SECONDS",
            zero_is_none=True,
        ),
    )
    cold_open_share: float = setting(
        0.25,
        check=share,
        flag=Flag(
            "largest fraction of time spent building environments that the warm pool "
            "does not have ready (a ROM load holds the GIL and pauses every session); opens "
            "past it wait their turn (1: no pacing)",
            metavar="SHARE",
        ),
    )
    cold_open_queue: int = setting(
        256,
        check=at_least(0),
        flag=Flag("opens that may wait at once for their turn to build; the next gets capacity"),
    )
    write_timeout: float | None = setting(
        DEFAULT_WRITE_TIMEOUT,
        check=above(0, " s"),
        flag=Flag(
            "abort a WebSocket connection whose client reads nothing of what it is sent for "
            "this long; meanwhile nothing more is read from it (0: never; default 30)",
            metavar="SECONDS",
            zero_is_none=True,
        ),
    )
    control_rate: float | None = setting(
        DEFAULT_CONTROL_RATE,
        check=at_least(1),
        flag=Flag(
            "pings and pongs a WebSocket client may send per second, in bursts of as many; "
            "beyond it the connection is closed with 1008 (0: no limit; default 100)",
            name="--control-frame-rate",
            metavar="PER_SECOND",
            zero_is_none=True,
        ),
    )
    busy_poll: float = setting(
        0.0,
        check=between(0, MAX_BUSY_POLL, f"between 0 and {MAX_BUSY_POLL:g} seconds"),
        flag=Flag(
            "after each message, poll the sockets this long without sleeping (e.g. 0.002): "
            "lower latency for a server on a core of its own, that core kept busy meanwhile "
            "(0: off; clients have the same option, busy_poll=...)",
            metavar="SECONDS",
        ),
    )

    def __post_init__(self) -> None:
        for item in fields(self):
            problem = _check(item, getattr(self, item.name))
            if problem is not None:
                raise SettingError(item.name, problem)

    @property
    def peer_quota(self) -> int:
        """The sessions one client address may hold (``max_sessions_per_peer`` or its default)."""
        if self.max_sessions_per_peer is not None:
            return self.max_sessions_per_peer
        return min(self.max_sessions, max(self.max_sessions // 4, 2 * self.max_envs))

    @staticmethod
    def flags() -> Iterator[tuple[str, Flag, Any]]:
        """Each field's name, flag, and default on the command line (None where the
        default is computed when the limits are made)."""
        for item in fields(ServerLimits):
            default = None if item.default is MISSING else item.default
            yield item.name, item.metadata["flag"], default


def setting_problem(name: str, value: Any) -> str | None:
    """What is wrong with `value` as the setting `name` of :class:`ServerLimits`, or None."""
    found = {item.name: item for item in fields(ServerLimits)}
    return _check(found[name], value)


def _check(item: Field[Any], value: Any) -> str | None:
    check: Check | None = item.metadata["check"]
    return None if check is None else check(value)
