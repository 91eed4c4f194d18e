"""Shared-memory observations for clients on the server's host (SPEC section 17).

A 100 KB Atari frame costs the server more to push through a loopback TCP
socket (copy into the kernel, segmentation, delivery, the client's copy out)
than everything else it does besides emulating. A client on the same host can
offer a memory region instead:

1. The client creates a sealed ``memfd`` (it cannot shrink or grow, so the
   server can never fault writing into it), writes 16 random bytes (the
   *nonce*) at its start, and sends ``X-OpenEnv-WS-SHM: <pid> <fd> <nonce hex>``
   in its WebSocket handshake.
2. The server resolves ``/proc/<pid>/fd/<fd>`` to the object it names without
   opening that object (``O_PATH``), checks through its own descriptor that
   it is such a memfd, and only then opens it; a region that starts with the
   nonce (which proves both run on one host and the client owns it) is
   mapped and the answer is ``X-OpenEnv-WS-SHM: ok``. Otherwise it is
   ``refused: <why>``, with one reason for every descriptor that does not
   qualify, so a refusal tells nothing about other files or processes; the
   session then works as usual.
3. On that connection, a ``result`` observation of at least
   :data:`MIN_SHARED_BYTES` is written into the region and the frame carries
   MessagePack ext type 2 (offset, dtype, shape) instead of the bytes. The
   server alternates between the two halves of the region after the first
   page, so a reply's array stays intact until the reply after next.
4. The client copies the array out (or expands its colour codes, SPEC
   section 18) when it decodes the reply.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import mmap
import os
import re
import stat
import struct
import sys
from typing import Any, NamedTuple

import msgpack
import numpy as np

from ._arrays import array_head, check_bools, parse_array_head, wire_array
from .errors import ProtocolError

__all__ = [
    "EXT_SHARED",
    "HEADER",
    "MIN_SHARED_BYTES",
    "UNUSABLE",
    "ClientRegion",
    "ServerRegion",
    "SharedArray",
    "SharedMemoryRefused",
    "Slot",
    "readonly_copy",
    "shared_memory_supported",
]

#: MessagePack extension type of an array in the connection's shared region.
EXT_SHARED = 2
#: Handshake header (request: the offer; response: the answer).
HEADER = "x-openenv-ws-shm"
#: Arrays smaller than this travel inline: for them the socket is cheaper.
MIN_SHARED_BYTES = 4096
#: Bytes at the start of the region before the two halves (the nonce lives here).
FIRST_PAGE = 4096
#: Region size a client offers by default (pages are only used once written).
DEFAULT_SIZE = 8 << 20
#: Largest region a server maps.
MAX_SIZE = 1 << 30

_MEMFD_NAME = "openenv-ws-obs"
# What /proc/self/fd shows for such a memfd (exactly: a longer name is another file).
_MEMFD_LINK = f"/memfd:{_MEMFD_NAME} (deleted)"
#: The answer to every offer whose descriptor does not qualify, whatever it names.
UNUSABLE = (
    "the offered descriptor is not a usable openenv-ws region (SPEC section 17.1 "
    "lists the rules); observations travel inline"
)
# Not in Python 3.11's fcntl (Linux 5.1+).
_F_SEAL_FUTURE_WRITE = 0x0010
_OFFER = re.compile(r"^([1-9][0-9]{0,9}) ([0-9]{1,9}) ([0-9a-f]{32})$")
_OFFSET = struct.Struct("<Q")
_MAX_VIEWS = 16  # cached views of a client region

logger = logging.getLogger(__name__)


class SharedMemoryRefused(Exception):
    """The server cannot use the region a client offered (the reason is the message)."""


class SharedArray(NamedTuple):
    """An array the server wrote into the shared region: where, what dtype, what shape."""

    offset: int
    code: int
    shape: tuple[int, ...]

    def ext_payload(self) -> bytes:
        return _OFFSET.pack(self.offset) + array_head(self.code, self.shape)

    def ext(self) -> msgpack.ExtType:
        """The MessagePack extension value (type 2) naming this array."""
        return msgpack.ExtType(EXT_SHARED, self.ext_payload())


def shared_memory_supported() -> bool:
    """True where sealed memfds and /proc/<pid>/fd exist (Linux)."""
    return (
        sys.platform.startswith("linux")
        and hasattr(os, "memfd_create")
        and os.path.isdir("/proc/self/fd")
    )


def readonly_copy(arr: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """A copy of `arr` that cannot be written to."""
    out = arr.copy()
    out.flags.writeable = False
    return out


def _half(size: int) -> int:
    return (size - FIRST_PAGE) // 2 & ~63


class ClientRegion:
    """The client's side: a sealed memfd offered in the handshake, read on each reply.

    Args:
        size: bytes of the region; observations up to about half of it (after
            the first page) go through it, larger ones inline.
    """

    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        import fcntl

        if not FIRST_PAGE + 2 * MIN_SHARED_BYTES <= size <= MAX_SIZE:
            raise ValueError(
                f"shared region size must be in {FIRST_PAGE + 2 * MIN_SHARED_BYTES}..{MAX_SIZE}"
            )
        fd = os.memfd_create(_MEMFD_NAME, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, size)
            seals = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
            self._map = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        self.size = size
        self.nonce = os.urandom(16)
        self._map[:16] = self.nonce
        # Views by payload: a server names the same few arrays (one per half and
        # shape) on every step. Dropped before the mapping is closed.
        self._views: dict[bytes, np.ndarray[Any, Any]] = {}

    def offer(self) -> str:
        """The handshake header value."""
        return f"{os.getpid()} {self.fd} {self.nonce.hex()}"

    def read(self, payload: bytes) -> np.ndarray[Any, Any]:
        """A read-only copy of the array an ext type 2 payload points at (a bool
        array's copy checked to hold only 0 and 1: the server may write the region
        again while it is read)."""
        arr = readonly_copy(self.view(payload))
        check_bools(arr)
        return arr

    def view(self, payload: bytes) -> np.ndarray[Any, Any]:
        """The array an ext type 2 payload points at, in place (valid until the
        server writes that half of the region again).

        Raises:
            ProtocolError: a payload that breaks section 17 (too short, a bad array
                head, outside the region), or a bool array holding bytes other
                than 0 and 1 (checked on every call: the bytes are the server's).
        """
        arr = self._views.get(payload)
        if arr is not None:
            check_bools(arr)
            return arr
        if len(payload) < 10:
            raise ProtocolError(f"shared array extension of {len(payload)} bytes is too short")
        (offset,) = _OFFSET.unpack_from(payload)
        dtype, shape, count, end = parse_array_head(payload, 8)
        if end != len(payload):
            raise ProtocolError("shared array extension holds bytes after its shape")
        nbytes = count * dtype.itemsize
        if offset < FIRST_PAGE or offset + nbytes > self.size:
            raise ProtocolError(
                f"shared array at offset {offset} ({nbytes} bytes) lies outside the "
                f"{self.size}-byte region"
            )
        arr = np.frombuffer(self._map, dtype, count, offset).reshape(shape)
        check_bools(arr)
        if len(self._views) >= _MAX_VIEWS:
            self._views.clear()
        self._views[bytes(payload)] = arr
        return arr

    def drop_descriptor(self) -> None:
        """Close the descriptor and keep the mapping: no new connection can attach it."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def close(self) -> None:
        self.drop_descriptor()
        self._views.clear()
        _unmap(self._map)


def _unmap(region: mmap.mmap) -> None:
    """Close the mapping of a region; an array still viewing it (one a caller kept,
    a failed call's) keeps it mapped until the last such array goes."""
    with contextlib.suppress(BufferError):
        region.close()


class _Unusable(Exception):
    """An offered descriptor fails a check of :func:`_map_offered` (the message says which)."""


def _mount_id(fd: int) -> int:
    """The id of the mount `fd`'s file is on (from /proc: no call into its file system)."""
    with open(f"/proc/self/fdinfo/{fd}", "rb") as info:
        for line in info:
            if line.startswith(b"mnt_id:"):
                return int(line[7:])
    raise _Unusable("the kernel shows no mount id")


@functools.cache
def _memfd_home() -> tuple[int, int]:
    """(mount id, device) of this kernel's memfds, read from one made for the purpose."""
    fd = os.memfd_create("openenv-ws-probe", os.MFD_CLOEXEC)
    try:
        return _mount_id(fd), os.fstat(fd).st_dev
    finally:
        os.close(fd)


def _map_offered(pid: int, fd_number: int, nonce: bytes) -> tuple[mmap.mmap, int]:
    """Map process `pid`'s descriptor `fd_number` if it is a client region holding `nonce`.

    Raises:
        _Unusable, OSError, ValueError: it is not (the message says why).
    """
    import fcntl

    home_mount, home_device = _memfd_home()
    # O_PATH takes the object the client's descriptor names without opening it
    # (no permission check, no side effect of opening). Every check below looks
    # at this process's own descriptor, which the client cannot swap; only an
    # object that passes them is opened for writing.
    handle = os.open(f"/proc/{pid}/fd/{fd_number}", os.O_PATH | os.O_CLOEXEC)
    try:
        # The mount first: fstat on a file elsewhere (FUSE) could call into a
        # file system its owner controls.
        if _mount_id(handle) != home_mount:
            raise _Unusable("not on the kernel's memfd mount")
        if os.readlink(f"/proc/self/fd/{handle}") != _MEMFD_LINK:
            raise _Unusable(f"not a memfd named {_MEMFD_NAME}")
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode) or info.st_dev != home_device:
            raise _Unusable("not a plain memfd (hugetlb?)")
        fd = os.open(
            f"/proc/self/fd/{handle}", os.O_RDWR | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK
        )
    finally:
        os.close(handle)
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        if not seals & fcntl.F_SEAL_SHRINK:
            raise _Unusable("not sealed against shrinking")
        if seals & (fcntl.F_SEAL_WRITE | _F_SEAL_FUTURE_WRITE):
            raise _Unusable("sealed against writing")
        # Read once shrinking is known to be sealed: the size can no longer drop
        # under the mapping (a write past the end would kill the server).
        size = os.fstat(fd).st_size
        if not FIRST_PAGE + 2 * MIN_SHARED_BYTES <= size <= MAX_SIZE:
            raise _Unusable(
                f"{size} bytes is outside {FIRST_PAGE + 2 * MIN_SHARED_BYTES}..{MAX_SIZE}"
            )
        region = mmap.mmap(fd, size)
    finally:
        os.close(fd)
    if region[:16] != nonce:
        region.close()
        raise _Unusable("the region does not hold the offered nonce")
    return region, size


class Slot(NamedTuple):
    """A half of a region as an array, and what names it in a reply once written."""

    view: np.ndarray[Any, Any]
    name: SharedArray


class ServerRegion:
    """The server's side: the client's memfd, mapped after the checks of :meth:`attach`."""

    def __init__(self, region: mmap.mmap, size: int) -> None:
        self._map = region
        self.size = size
        self._half = _half(size)
        self._turn = 0
        # (shape, dtype) -> for each half, a view of it and its SharedArray: a
        # session asks for the same layout on every step.
        self._views: dict[Any, tuple[Slot, ...]] = {}
        # The last layout asked for (by identity) and its slots: no hashing per step.
        self._last: tuple[Any, tuple[Slot, ...] | None] = ((), None)
        #: The session writing into the region (None until one takes it).
        self.owner: object | None = None

    @classmethod
    def attach(cls, offer: str) -> ServerRegion:
        """Map the region of a handshake offer; :class:`SharedMemoryRefused` says why not.

        Every offer whose descriptor does not qualify gets the same reason
        (:data:`UNUSABLE`); the particular one is logged at debug level.
        """
        if not shared_memory_supported():
            raise SharedMemoryRefused("this server's platform has no sealed memfds")
        match = _OFFER.match(offer.strip())
        if match is None:
            raise SharedMemoryRefused("the offer is not '<pid> <fd> <32 hex digits>'")
        pid, fd_number, nonce = int(match[1]), int(match[2]), bytes.fromhex(match[3])
        try:
            region, size = _map_offered(pid, fd_number, nonce)
        except (_Unusable, OSError, ValueError) as exc:
            logger.debug("shared region of pid %d fd %d refused: %s", pid, fd_number, exc)
            raise SharedMemoryRefused(UNUSABLE) from None
        return cls(region, size)

    def reserve(self, layout: tuple[tuple[int, ...], np.dtype[Any]]) -> Slot | None:
        """The next half of the region as an array of `layout` (shape, dtype) to write
        an observation into, and the :class:`SharedArray` that names it once written.

        None if such an array is too small to be worth it or does not fit. Pass
        the same `layout` object on every step: it is recognized by identity.
        """
        last, slots = self._last
        if layout is not last:
            slots = self._slots(layout)
            self._last = (layout, slots)
        if slots is None:
            return None
        turn = self._turn
        self._turn = turn ^ 1
        return slots[turn]

    def _slots(self, layout: tuple[tuple[int, ...], np.dtype[Any]]) -> tuple[Slot, ...] | None:
        if layout in self._views:
            return self._views[layout]
        shape, dtype = layout
        nbytes = dtype.itemsize
        for d in shape:
            nbytes *= d
        if not MIN_SHARED_BYTES <= nbytes <= self._half or len(self._views) >= 8:
            return None
        try:
            code, probe = wire_array(np.empty((0,) * len(shape), dtype))
        except ProtocolError:
            return None  # put() names the problem
        if probe.dtype != dtype:
            return None  # not the wire's byte order: put() converts it
        slots = []
        for turn in (0, 1):
            offset = self._offset(turn)
            view: np.ndarray[Any, Any] = np.ndarray(shape, dtype, self._map, offset)
            slots.append(Slot(view, SharedArray(offset, code, tuple(shape))))
        out = self._views[layout] = tuple(slots)
        return out

    def put(self, arr: np.ndarray[Any, Any]) -> SharedArray | None:
        """Copy `arr` into the next half of the region; None if it does not fit."""
        code, arr = wire_array(arr)
        if arr.nbytes > self._half:
            return None
        offset = self._next_half()
        target = np.ndarray(arr.shape, arr.dtype, self._map, offset)
        target[...] = arr
        del target
        return SharedArray(offset, code, arr.shape)

    def put_within(self, value: Any) -> Any:
        """`value` (a structured observation: maps and lists holding arrays) with its
        largest array of at least :data:`MIN_SHARED_BYTES` moved into the region
        (one array per result, as :meth:`put`) as its ext type 2 value; the
        containers on its path are copied, never changed. `value` itself when no
        array fits."""
        best: tuple[int, tuple[Any, ...]] = (MIN_SHARED_BYTES - 1, ())
        stack: list[tuple[Any, tuple[Any, ...]]] = [(value, ())]
        while stack:
            node, path = stack.pop()
            items = node.items() if type(node) is dict else enumerate(node)
            for key, item in items:
                kind = type(item)
                if kind is np.ndarray and best[0] < item.nbytes <= self._half:
                    best = (item.nbytes, (*path, key))
                elif (kind is dict or kind is list) and len(path) < 16:
                    stack.append((item, (*path, key)))
        if not best[1]:
            return value
        return _replaced(value, best[1], self.put)

    def _next_half(self) -> int:
        """The offset of the half to write next (the two halves take turns)."""
        offset = self._offset(self._turn)
        self._turn ^= 1
        return offset

    def _offset(self, turn: int) -> int:
        return FIRST_PAGE + turn * self._half

    def close(self) -> None:
        self._last = ((), None)
        self._views.clear()
        _unmap(self._map)


def _replaced(value: Any, path: tuple[Any, ...], put: Any) -> Any:
    """A copy of the containers of `value` along `path`, the array at its end put."""
    head, rest = path[0], path[1:]
    copy = dict(value) if type(value) is dict else list(value)
    item = value[head]
    if rest:
        copy[head] = _replaced(item, rest, put)
    else:
        shared = put(item)
        copy[head] = item if shared is None else shared.ext()
    return copy
