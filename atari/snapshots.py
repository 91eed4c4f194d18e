"""The envelope of Atari snapshots: signed, so that only this server's reach the emulator.

A snapshot is a JSON header, ALE's serialized state and the screen, behind a
magic and their lengths, followed by an HMAC-SHA256 tag under the process's
snapshot key (:data:`SNAPSHOT_KEY_ENV`). ALE's state decoder is not meant
for untrusted bytes: :func:`open_seal` refuses anything this key did not sign.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import struct
from typing import Any

from openenv_ws.errors import BadSnapshot

__all__ = ["SNAPSHOT_KEY_ENV", "open_seal", "seal"]

#: Environment variable holding the key that signs snapshots. Servers whose
#: workers must accept each other's snapshots set the same value in each; when
#: unset, every process draws its own key and accepts only its own snapshots.
SNAPSHOT_KEY_ENV = "OPENENV_WS_SNAPSHOT_KEY"

_MAGIC = b"OEWS-ATARI\x00\x01"
_TAG = hashlib.sha256().digest_size
# Three parts follow the magic: a JSON header, ALE's serialized state, the screen.
_LENGTHS = struct.Struct(">III")
_key: bytes | None = None


def _snapshot_key() -> bytes:
    global _key
    if _key is None:
        shared = os.environ.get(SNAPSHOT_KEY_ENV)
        _key = shared.encode() if shared else secrets.token_bytes(32)
    return _key


def seal(*parts: bytes) -> bytes:
    body = b"".join((_MAGIC, _LENGTHS.pack(*map(len, parts)), *parts))
    return body + hmac.new(_snapshot_key(), body, hashlib.sha256).digest()


def open_seal(data: Any) -> tuple[bytes, ...]:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise BadSnapshot(f"snapshot must be bytes, got {type(data).__name__}")
    data = bytes(data)
    offset = len(_MAGIC) + _LENGTHS.size
    if len(data) < offset + _TAG or not data.startswith(_MAGIC):
        raise BadSnapshot(
            "snapshot is not an Atari snapshot of this server; take one with snapshot()"
        )
    body, tag = data[:-_TAG], data[-_TAG:]
    if not hmac.compare_digest(tag, hmac.new(_snapshot_key(), body, hashlib.sha256).digest()):
        raise BadSnapshot(
            "snapshot signature does not match: it was damaged or made by another server "
            f"(servers that share snapshots must share {SNAPSHOT_KEY_ENV})"
        )
    lengths = _LENGTHS.unpack_from(body, len(_MAGIC))
    if offset + sum(lengths) != len(body):
        raise BadSnapshot("snapshot length fields are inconsistent")
    parts = []
    for n in lengths:
        parts.append(body[offset : offset + n])
        offset += n
    return tuple(parts)
