"""Running the app under uvicorn with the settings measured fastest here.

WebSockets are served by :class:`~openenv_ws.server.transport.fastws.FastWebSocketProtocol`
(uvicorn's ``websockets-sansio``, its leanest implementation, with binary
messages parsed, served and framed inline, optionally busy-polling) and uvloop
is the event loop; permessage-deflate stays off (on loopback it costs about 3x
on 100 KB frames and saves nothing).
"""

from __future__ import annotations

import os
import socket
import ssl
import threading
from typing import Any

import uvicorn

from ..limits import ServerLimits
from .drain import DrainingServer, app_state
from .fastws import protocol_class
from .guard import ConnectionGuard, guarded
from .tlsaccept import loop_name, tls_loop

__all__ = ["ServerThread", "bind_socket", "tls_problem", "uvicorn_config"]


def uvicorn_config(
    app: Any,
    *,
    limits: ServerLimits | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "warning",
    **extra: Any,
) -> uvicorn.Config:
    """A uvicorn config for serving `app` (an ASGI app or an import string).

    Its transport settings come from `limits` (default: those the app was made
    with by ``create_app``, else the defaults): ``max_frame_size``, the
    heartbeat, ``busy_poll``, ``write_timeout``, ``control_rate``, the
    connection limits of :class:`~openenv_ws.server.transport.guard.ConnectionGuard`
    and ``drain_timeout``. With TLS (``ssl_certfile`` in `extra`) the connection
    limits hold from accept, before the TLS handshake, and ``handshake_timeout``
    bounds that handshake too (see :mod:`~openenv_ws.server.transport.tlsaccept`).
    """
    if limits is None:
        limits = app_state(app, "limits", ServerLimits) or ServerLimits()
    guard = ConnectionGuard(
        max_connections=limits.max_connections,
        max_per_peer=limits.max_connections_per_peer,
        handshake_timeout=limits.handshake_timeout,
        max_head_size=limits.max_head_size,
    )
    # uvicorn takes a loop class as well as a name: with TLS, a class.
    tls = extra.get("ssl_certfile")
    loop: Any = tls_loop(limits.handshake_timeout) if tls else loop_name()
    extra.setdefault("timeout_graceful_shutdown", limits.drain_timeout)
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=guarded(guard),
        ws=protocol_class(
            busy_poll=limits.busy_poll,
            write_timeout=limits.write_timeout,
            control_rate=limits.control_rate,
        ),
        loop=loop,
        ws_per_message_deflate=False,
        ws_max_size=limits.max_frame_size,
        ws_ping_interval=limits.ping_interval,
        ws_ping_timeout=limits.ping_timeout,
        lifespan="on",
        log_level=log_level,
        access_log=False,
        **extra,
    )


def tls_problem(
    certfile: str | os.PathLike[str] | None,
    keyfile: str | os.PathLike[str] | None,
    password: str | None = None,
) -> str | None:
    """Why the server cannot serve TLS with these PEM files (one line), or None.

    Loads them as uvicorn will, but never lets OpenSSL ask for a password on
    the terminal: an encrypted key without `password` is a problem.
    """
    if certfile is None:
        return None if keyfile is None else "--keyfile needs --certfile (the certificate)"
    texts = {}
    for flag, path in (("--certfile", certfile), ("--keyfile", keyfile)):
        if path is None:
            continue
        try:
            with open(path, "rb") as file:
                texts[flag] = file.read()
        except OSError as exc:
            return f"{flag} {os.fspath(path)}: {exc.strerror or exc}"
    key_flag = "--keyfile" if keyfile is not None else "--certfile"
    key = texts[key_flag]
    if b"-----BEGIN CERTIFICATE-----" not in texts["--certfile"]:
        return f"--certfile {os.fspath(certfile)} holds no PEM certificate"
    if b"PRIVATE KEY-----" not in key:
        where = os.fspath(keyfile or certfile)
        return f"{key_flag} {where} holds no PEM private key" + (
            "; give the key with --keyfile" if keyfile is None else ""
        )
    encrypted = b"ENCRYPTED" in key
    if encrypted and not password:
        return "the private key is encrypted; give its password with --keyfile-password"
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(certfile, keyfile, lambda: (password or "").encode())
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            return f"the key in {os.fspath(keyfile or certfile)} does not match the certificate"
        if encrypted:
            return "--keyfile-password does not decrypt the private key"
        return f"cannot load the TLS certificate and key ({exc.reason or exc})"
    return None


def bind_socket(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A listening TCP socket; with port 0 the OS picks a free port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class ServerThread:
    """A uvicorn server on a background thread, for tests and embedding.

    Binds before starting, so the port is known (and free) up front::

        with ServerThread(create_app(fake_factory)) as server:
            client = EnvClient(server.url)

    The transport is set by `limits` (default: the app's, see :func:`uvicorn_config`);
    other keywords go to uvicorn (``ssl_certfile``, ...).
    """

    def __init__(
        self,
        app: Any,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        limits: ServerLimits | None = None,
        **config: Any,
    ) -> None:
        self._sock = bind_socket(host, port)
        self.host = host
        #: Whether the server speaks TLS (``ssl_certfile`` given): its URLs are wss/https.
        self.secure = bool(config.get("ssl_certfile"))
        self.port: int = self._sock.getsockname()[1]
        # Stopping drains like SIGTERM does: sessions get ``shutting_down`` and 1001.
        self.server: uvicorn.Server = DrainingServer(
            uvicorn_config(app, limits=limits, host=host, port=self.port, **config)
        )
        self._thread = threading.Thread(
            target=self._run, name=f"openenv-ws-server:{self.port}", daemon=True
        )
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        """The server's ws:// (wss:// with TLS) URL: the session endpoint."""
        return f"{'wss' if self.secure else 'ws'}://{self.host}:{self.port}/ws"

    @property
    def http_url(self) -> str:
        """The server's http:// (https:// with TLS) base URL."""
        return f"{'https' if self.secure else 'http'}://{self.host}:{self.port}"

    def _run(self) -> None:
        try:
            self.server.run(sockets=[self._sock])
        except BaseException as exc:  # noqa: BLE001 - reported by start()
            self._error = exc

    def start(self, *, timeout: float = 10.0) -> ServerThread:
        self._thread.start()
        ready = threading.Event()

        def poll() -> None:
            while not self.server.started and self._thread.is_alive():
                threading.Event().wait(0.005)
            ready.set()

        threading.Thread(target=poll, daemon=True).start()
        if not ready.wait(timeout) or not self.server.started:
            self.stop()
            raise RuntimeError(f"server did not start within {timeout} s: {self._error!r}")
        return self

    def stop(self, *, timeout: float = 10.0) -> None:
        self.server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._sock.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
