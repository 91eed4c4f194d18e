"""TLS for the clients: which context a secure connection verifies with, what a
failed handshake becomes, and the rule that keeps a bearer token off plain-text
links to other hosts.

Verification is on by default (the system's CA store, host name checked);
``ca_file`` trusts a given CA bundle instead, ``ssl_context`` is used as given.
Nothing here ever falls back to an unverified connection.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Sequence
from urllib.parse import urlsplit

from .._hosts import is_loopback
from ..errors import ServerUnavailable, TLSError
from ._core import TOKEN_ENV

__all__ = [
    "check_token",
    "client_context",
    "is_secure",
    "looks_like_tls",
    "plain_to_tls",
    "secure_transport",
    "tls_error",
]

_SECURE_SCHEMES = frozenset({"wss", "https"})


def is_secure(url: str) -> bool:
    """Whether `url` asks for TLS (``wss://`` or ``https://``)."""
    return urlsplit(url).scheme in _SECURE_SCHEMES


def client_context(
    urls: Sequence[str],
    ca_file: str | os.PathLike[str] | None,
    ssl_context: ssl.SSLContext | None,
) -> ssl.SSLContext | None:
    """The context the client's secure connections use; None when no URL is secure.

    Args:
        urls: the client's server URLs (normalized).
        ca_file: a PEM bundle of the CA certificates to trust instead of the system's.
        ssl_context: a context used as it is (its own verification settings).

    Raises:
        ValueError: both options given; `ca_file` unreadable or without a CA
            certificate; a TLS option given while no URL is ``wss://``/``https://``.
        TypeError: `ssl_context` is not an :class:`ssl.SSLContext`.
    """
    if ssl_context is not None and ca_file is not None:
        raise ValueError("pass ca_file or ssl_context, not both (a context carries its own CAs)")
    if ssl_context is not None and not isinstance(ssl_context, ssl.SSLContext):
        raise TypeError(f"ssl_context must be an ssl.SSLContext, got {type(ssl_context).__name__}")
    secure = [url for url in urls if is_secure(url)]
    if not secure:
        if ca_file is not None or ssl_context is not None:
            option = "ca_file" if ca_file is not None else "ssl_context"
            raise ValueError(
                f"{option} was given but no server URL uses TLS; use wss:// or https:// "
                "(the server needs --certfile and --keyfile)"
            )
        return None
    if ssl_context is not None:
        return ssl_context
    if ca_file is None:
        return ssl.create_default_context()
    path = os.fspath(ca_file)
    try:
        return ssl.create_default_context(cafile=path)
    except FileNotFoundError:
        raise ValueError(f"ca_file '{path}' does not exist") from None
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(
            f"ca_file '{path}' cannot be used as a CA bundle ({_reason(exc)}); "
            "give a PEM file of CA certificates"
        ) from None


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    if isinstance(exc, ssl.SSLError) and reason:
        return str(reason).replace("_", " ").lower()  # WRONG_VERSION_NUMBER -> wrong version number
    return str(reason or getattr(exc, "strerror", None) or exc)


def tls_error(exc: ssl.SSLError, url: str) -> TLSError | ServerUnavailable:
    """The error a failed TLS handshake with `url` becomes, naming the problem.

    A connection cut in the middle of the handshake is :class:`ServerUnavailable`
    (worth trying again); a refused certificate or a peer that does not speak
    TLS is :class:`TLSError` (it is not).
    """
    if isinstance(exc, (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)):
        return ServerUnavailable(f"{url} closed the connection during the TLS handshake")
    if isinstance(exc, ssl.SSLCertVerificationError):
        problem = exc.verify_message or _reason(exc)
        code = exc.verify_code
        # OpenSSL's X509_V_ERR_* codes: an issuer nobody trusts, or a self-signed one.
        if code in (2, 18, 19, 20, 21):
            hint = "trust the CA that signed it with ca_file= (or ssl_context=)"
        elif code in (9, 10):  # not yet valid, expired
            hint = "the server's certificate must be renewed (or the clocks disagree)"
        elif code in (62, 64):  # host name or IP address mismatch
            hint = "connect by a name the certificate lists, or reissue it for this one"
        else:
            hint = "the server's certificate is not acceptable"
        return TLSError(f"certificate verify failed: {problem} (server {url}); {hint}")
    reason = _reason(exc)
    if reason in ("wrong version number", "record layer failure", "http request"):
        return TLSError(
            f"the server at {url} does not answer in TLS ({reason}); it serves plain "
            "ws:// / http:// (use that), or start it with --certfile and --keyfile"
        )
    return TLSError(f"TLS handshake with {url} failed: {reason}")


def looks_like_tls(data: bytes | bytearray | memoryview) -> bool:
    """Whether `data`, the start of an answer to a plain HTTP request, is a TLS record
    (a handshake or an alert), i.e. the server expects TLS."""
    return len(data) >= 3 and data[0] in (0x15, 0x16) and data[1] == 0x03 and data[2] <= 0x04


def plain_to_tls(url: str) -> TLSError:
    """The error for a plain connection to a server that speaks TLS."""
    secure = url.replace("ws://", "wss://", 1).replace("http://", "https://", 1)
    return TLSError(f"the server at {url} expects TLS; connect to {secure} instead")


def check_token(
    url: str, token: str | None, *, allow_insecure: bool, from_environment: bool = False
) -> None:
    """Refuse to send `token` over plain text to a host other than this one.

    Called before any connection is made. Loopback hosts and ``wss://`` /
    ``https://`` URLs are fine.

    Raises:
        ValueError: a token, a plain URL and a non-loopback host, unless
            `allow_insecure` (the message names the host and the option).
    """
    if not token or allow_insecure or is_secure(url):
        return
    host = urlsplit(url).hostname
    if is_loopback(host):
        return
    source = " (from OPENENV_WS_TOKEN)" if from_environment else ""
    raise ValueError(
        f"refusing to send the bearer token{source} in plain text to {host} ({url}): "
        "use wss:// or https:// with a server started with --certfile/--keyfile, or pass "
        "allow_insecure_token=True if the link itself is private"
    )


def secure_transport(
    urls: Sequence[str],
    token: str | None,
    ca_file: str | os.PathLike[str] | None,
    ssl_context: ssl.SSLContext | None,
    allow_insecure_token: bool,
) -> ssl.SSLContext | None:
    """Check a client's TLS and token options before it connects to `urls`; the
    context its secure connections use (None: no URL is secure).

    `token` is the client's argument (None: ``OPENENV_WS_TOKEN``, which
    counts as a token too).

    Raises:
        ValueError: see :func:`check_token` and :func:`client_context`.
    """
    resolved = token if token is not None else os.environ.get(TOKEN_ENV)
    for url in urls:
        check_token(
            url, resolved, allow_insecure=allow_insecure_token, from_environment=token is None
        )
    return client_context(urls, ca_file, ssl_context)
