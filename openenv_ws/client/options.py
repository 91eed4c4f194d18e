"""The clients' connection options, declared once.

Every client takes its transport options as keywords (``EnvClient(url,
ca_file=..., timeout=...)``); this module is where they are written down: their
names and types for IDEs and type checkers (the :class:`TransportOptions`
family of ``TypedDict``, used as ``**options: Unpack[...]``), their defaults and
their meaning (:class:`ClientOptions`, the frozen value a client keeps).
Adding an option is a line in each of the two classes here, plus its use.

Which client takes which:

- :class:`TransportOptions`: every client, the HTTP fallback included;
- :class:`SessionOptions`: the WebSocket clients (``AsyncEnvClient``);
- :class:`BlockingOptions`: the blocking WebSocket clients (``EnvClient``,
  ``VectorEnvClient``, ``VectorSessionClient``).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self, TypedDict

from ._core import ClientCore
from ._tls import secure_transport

__all__ = ["BlockingOptions", "ClientOptions", "SessionOptions", "TransportOptions"]


class TransportOptions(TypedDict, total=False):
    """The options of every client (see :class:`ClientOptions` for their meaning)."""

    token: str | None
    open_timeout: float | None
    timeout: float | None
    max_frame_size: int
    ca_file: str | os.PathLike[str] | None
    ssl_context: ssl.SSLContext | None
    allow_insecure_token: bool
    compression: str | Sequence[str] | None


class SessionOptions(TransportOptions, total=False):
    """The options of a WebSocket client: :class:`TransportOptions` and the session's own."""

    resume: bool
    resume_timeout: float
    shared_memory: bool
    indexed_frames: bool | None
    delta: bool


class BlockingOptions(SessionOptions, total=False):
    """The options of a blocking WebSocket client: :class:`SessionOptions` and ``busy_poll``."""

    busy_poll: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientOptions:
    """A client's options, resolved: what was given, defaults for the rest.

    Attributes:
        token: bearer token, if the server requires one (None: the
            ``OPENENV_WS_TOKEN`` environment variable).
        open_timeout: seconds to connect and open the session (None: no limit).
        timeout: default seconds to wait for each reply (None: no limit).
        max_frame_size: largest reply accepted, in bytes; it also bounds the
            observations of one reply as decoded (decompressed, or read from
            the shared region), whatever the server's spec declares.
        ca_file: for ``wss://`` and ``https://``: a PEM bundle of the CA
            certificates to trust instead of the system's (the server's
            certificate is always verified).
        ssl_context: for ``wss://`` and ``https://``: an :class:`ssl.SSLContext`
            used as it is (not with `ca_file`).
        allow_insecure_token: send the token over plain ``ws://`` to a host
            other than this one (refused by default: anyone on the path reads it).
        compression: compress observations sent over the network (SPEC
            section 19): ``"auto"`` (default) offers every codec this install
            has (zstd, lz4) when the server is not on a loopback address,
            ``"zstd"`` or ``"lz4"`` offers that one, None sends them raw. The
            server picks; the client's ``compression`` property tells what it chose.
        resume: when the connection drops mid-session, reconnect and resume
            the session transparently (the request in flight is re-sent and
            is applied once); if that is impossible, ``SessionClosed`` says why.
        resume_timeout: seconds to keep trying to resume.
        shared_memory: when the server is on this host (a loopback URL), offer
            it a shared memory region so that large observations skip the
            socket (SPEC section 17); the server falls back to sending them
            inline when it cannot use it.
        indexed_frames: ask the server for RGB frames as palette indices, one
            byte per pixel instead of three, which the client expands (SPEC
            section 18); the observations are the same arrays. None (default):
            when the C expander is built (``openenv_ws.palette.NATIVE``).
        delta: with compression, also accept frames sent as the difference
            from the previous observation (a few hundred bytes for an Atari
            screen); the arrays you get are the same.
        busy_poll: seconds to spin before sleeping while waiting for a reply
            (0: never spin). Spinning costs client CPU and saves the kernel's
            wake-up latency, which dominates step latency on some VMs.
    """

    token: str | None = None
    open_timeout: float | None = 30.0
    timeout: float | None = 60.0
    max_frame_size: int = 64 << 20
    ca_file: str | os.PathLike[str] | None = None
    ssl_context: ssl.SSLContext | None = None
    allow_insecure_token: bool = False
    compression: str | Sequence[str] | None = "auto"
    resume: bool = True
    resume_timeout: float = 30.0
    shared_memory: bool = True
    indexed_frames: bool | None = None
    delta: bool = True
    busy_poll: float = 0.0

    @classmethod
    def of(
        cls,
        client: str,
        given: Mapping[str, Any],
        accepted: Any = BlockingOptions,
        **defaults: Any,
    ) -> Self:
        """The options `given` to `client` (its name, for errors), over `defaults`
        where that client's differ from the ones here.

        Raises:
            TypeError: a keyword that is not one of `accepted`'s (one of the
                ``TypedDict`` classes here), as Python says it of an unknown keyword.
        """
        for name in given:
            if name not in accepted.__optional_keys__:
                raise TypeError(f"{client}() got an unexpected keyword argument {name!r}")
        return cls(**{**defaults, **given})

    @property
    def resume_seconds(self) -> float:
        """Seconds to try resuming a dropped connection (0: resuming is off)."""
        return self.resume_timeout if self.resume else 0.0

    def tls(self, urls: Sequence[str]) -> ssl.SSLContext | None:
        """Check the TLS and token options for `urls` (before connecting); the
        context secure connections verify with (None: no URL is secure).

        Raises:
            ValueError: a token for a plain-text link to another host, or bad TLS options.
        """
        return secure_transport(
            urls, self.token, self.ca_file, self.ssl_context, self.allow_insecure_token
        )

    def core(
        self, config: Mapping[str, Any] | None, *, indexed_frames: bool | None = None
    ) -> ClientCore:
        """A session's protocol state for `config` with these options (`indexed_frames`
        overrides the option: the clients that never ask for them say False)."""
        return ClientCore(
            config or {},
            token=self.token,
            max_frame_size=self.max_frame_size,
            indexed_frames=self.indexed_frames if indexed_frames is None else indexed_frames,
        )
