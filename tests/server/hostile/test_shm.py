"""Shared-memory offers from a hostile client on the server's host (issue 18, finding 4).

The attacker speaks raw HTTP: its handshake carries an ``X-OpenEnv-WS-SHM``
offer (SPEC section 17.1) built by hand, naming descriptors the project's
client never offers: a regular file, a descriptor it swaps between a memfd
and a file while the server looks, a memfd with a longer name, memfds sealed
against writing, a hugetlb memfd. The server must answer each with the one
generic ``refused:`` reason (never HTTP 500, never a size or a path), and
must never open a file it was not offered a memfd for: an inotify watch on
the file sees every open, by anyone, for reading or writing. A neighbour
session steps throughout.

Run as root (as CI does), the racing attacker drops to uid ``nobody`` and
races for a 0600 root file, as in the report: a process holds an ``O_PATH``
descriptor to any file it can reach by path, whatever the file's mode.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import importlib
import json
import os
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from openenv_ws._shm import HEADER, UNUSABLE, ClientRegion, shared_memory_supported

from ..._rawwire import exchange, upgrade_bytes
from .conftest import UNIT, HostileServer, Neighbour, assert_contained, hostile_server

pytestmark = pytest.mark.skipif(
    not shared_memory_supported(), reason="shared memory needs Linux memfds"
)

REFUSED = f"refused: {UNUSABLE}"
NOBODY = 65534
F_SEAL_FUTURE_WRITE = 0x0010  # not in Python 3.11's fcntl
RACES = 300


def handshake(host: str, port: int, offer: str, *, timeout: float) -> tuple[int, str]:
    """A WebSocket handshake offering `offer`; (HTTP status, the server's shm answer)."""
    request = upgrade_bytes(f"{host}:{port}", f"X-OpenEnv-WS-SHM: {offer}")
    answer = exchange(host, port, request, timeout=timeout)
    return answer.status, answer.headers.get(HEADER, "")


def _answer(server: HostileServer, offer: str) -> tuple[int, str]:
    return handshake(server.host, server.port, offer, timeout=10 * UNIT)


class OpenWatch:
    """inotify on one file: every open, read, write and close of it, by any process."""

    MASK = 0x1 | 0x2 | 0x8 | 0x10 | 0x20  # access, modify, close (write, nowrite), open

    def __init__(self, path: Path) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        assert self.fd >= 0, f"inotify_init1: {os.strerror(ctypes.get_errno())}"
        wd = libc.inotify_add_watch(self.fd, os.fsencode(path), self.MASK)
        assert wd >= 0, f"inotify_add_watch: {os.strerror(ctypes.get_errno())}"

    def events(self) -> list[str]:
        """The events since the last call, as hex masks (0x20 open, 0x8 closed after writing)."""
        out: list[str] = []
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return out
            offset = 0
            while offset < len(data):
                _wd, mask, _cookie, length = struct.unpack_from("iIII", data, offset)
                out.append(hex(mask))
                offset += 16 + length

    def close(self) -> None:
        os.close(self.fd)


@contextlib.contextmanager
def private_file(tmp_path: Path) -> Iterator[tuple[Path, bytes, OpenWatch]]:
    """A 0600 file of 64 KiB that starts like a region (a nonce), watched from now on."""
    path = tmp_path / "private"
    content = os.urandom(16) + bytes(1 << 16)
    path.write_bytes(content)
    path.chmod(0o600)
    watch = OpenWatch(path)
    try:
        yield path, content, watch
    finally:
        watch.close()


def _memfd(name: str, size: int, seals: int, *, flags: int = 0, nonce: bytes = b"") -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING | flags)
    os.ftruncate(fd, size)
    if nonce:
        os.pwrite(fd, nonce, 0)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd


SIZE_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW


def test_an_offer_naming_a_file_is_refused_without_opening_it(tmp_path: Path) -> None:
    with (
        hostile_server() as server,
        Neighbour(server) as neighbour,
        private_file(tmp_path) as (path, content, watch),
    ):
        rss = server.rss()
        # O_PATH: the attacker needs no permission on the file to hold this.
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        try:
            for _ in range(20):
                offer = f"{os.getpid()} {fd} {content[:16].hex()}"
                assert _answer(server, offer) == (101, REFUSED)
        finally:
            os.close(fd)
        assert watch.events() == [], "the server opened the file it was offered"
        assert path.read_bytes() == content
        assert_contained(server, neighbour, rss_before=rss)


# `python -c` puts the working directory (the checkout) first on the path.
ATTACK = """
import sys
from tests.server.hostile.test_shm import race
race(sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5]))
"""


def race(host: str, port: int, target: str, count: int, seconds: float) -> None:
    """The racing attacker (run in its own process): offer a memfd while a thread swaps
    a descriptor of `target` in its place; print the answers' counts as JSON."""
    file_fd = os.open(target, os.O_PATH | os.O_CLOEXEC)
    if os.geteuid() == 0:
        # Codecs the handshake loads lazily, while this interpreter's files are readable.
        for codec in ("idna", "latin_1"):
            importlib.import_module(f"encodings.{codec}")
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    nonce = os.urandom(16)
    memfd = _memfd("openenv-ws-obs", 1 << 20, SIZE_SEALS, nonce=nonce)
    slot = os.dup(memfd)
    offer = f"{os.getpid()} {slot} {nonce.hex()}"
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            os.dup2(file_fd, slot)
            os.dup2(memfd, slot)

    sys.setswitchinterval(1e-4)  # the swapping thread hands the GIL back soon
    threading.Thread(target=swap, daemon=True).start()
    answers: Counter[str] = Counter()
    deadline = time.monotonic() + seconds
    while sum(answers.values()) < count and time.monotonic() < deadline:
        status, answer = handshake(host, port, offer, timeout=seconds)
        answers[f"{status} {answer}"] += 1
    stop.set()
    print(json.dumps({"uid": os.getuid(), "answers": answers}))


def test_a_client_swapping_its_descriptor_never_gets_the_server_to_open_a_file(
    tmp_path: Path,
) -> None:
    with (
        hostile_server() as server,
        Neighbour(server) as neighbour,
        private_file(tmp_path) as (path, content, watch),
    ):
        rss = server.rss()
        seconds = 60 * UNIT
        limits = (str(RACES), str(seconds))
        root = Path(__file__).resolve().parents[3]
        attack = subprocess.run(
            [sys.executable, "-c", ATTACK, server.host, str(server.port), str(path), *limits],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=seconds + 30 * UNIT,
        )
        assert attack.returncode == 0, attack.stderr[-3000:]
        report = json.loads(attack.stdout)
        answers = report["answers"]
        opened = watch.events()
        assert opened == [], f"the server opened the file swapped in for the memfd: {answers}"
        assert path.read_bytes() == content
        assert report["uid"] == (NOBODY if os.geteuid() == 0 else os.getuid())
        assert sum(answers.values()) == RACES, answers
        # Both sides of the race were hit: the memfd was mapped, the file refused.
        assert set(answers) == {"101 ok", f"101 {REFUSED}"}, answers
        assert_contained(server, neighbour, rss_before=rss)


def test_refusals_are_one_answer_whatever_the_descriptor_is(tmp_path: Path) -> None:
    nonce = os.urandom(16)
    regular = tmp_path / "regular"
    regular.write_bytes(nonce + bytes(1 << 16))
    fds = {
        "a regular file": os.open(regular, os.O_RDWR | os.O_CLOEXEC),
        "a memfd named openenv-ws-obsX": _memfd(
            "openenv-ws-obsX", 1 << 20, SIZE_SEALS, nonce=nonce
        ),
        "a memfd named otherwise": _memfd("something-else", 1 << 20, SIZE_SEALS, nonce=nonce),
        "a memfd too small": _memfd("openenv-ws-obs", 4096, SIZE_SEALS, nonce=nonce),
        "a memfd too big": _memfd("openenv-ws-obs", (1 << 30) + 4096, SIZE_SEALS, nonce=nonce),
        "an unsealed memfd": _memfd("openenv-ws-obs", 1 << 20, 0, nonce=nonce),
        "a memfd without the nonce": _memfd("openenv-ws-obs", 1 << 20, SIZE_SEALS),
    }
    fds["a pipe"], pipe_in = os.pipe()
    honest = ClientRegion()
    offers = {what: f"{os.getpid()} {fd} {nonce.hex()}" for what, fd in fds.items()}
    offers["a missing descriptor"] = f"{os.getpid()} 999999 {nonce.hex()}"
    offers["a missing process"] = f"4000000000 {honest.fd} {nonce.hex()}"
    offers["another process's descriptor"] = f"1 0 {nonce.hex()}"
    try:
        with hostile_server() as server, Neighbour(server) as neighbour:
            rss = server.rss()
            answers = {what: _answer(server, offer) for what, offer in offers.items()}
            assert answers == dict.fromkeys(offers, (101, REFUSED))
            # The honest client's region still works, as the control.
            assert _answer(server, honest.offer()) == (101, "ok")
            assert_contained(server, neighbour, rss_before=rss)
    finally:
        honest.close()
        for fd in (*fds.values(), pipe_in):
            os.close(fd)


def test_memfds_that_cannot_be_mapped_are_refused_not_a_server_error() -> None:
    nonce = os.urandom(16)
    fds = {
        "sealed against writes": _memfd(
            "openenv-ws-obs", 1 << 20, SIZE_SEALS | fcntl.F_SEAL_WRITE, nonce=nonce
        ),
        "sealed against future writes": _memfd(
            "openenv-ws-obs", 1 << 20, SIZE_SEALS | F_SEAL_FUTURE_WRITE, nonce=nonce
        ),
    }
    try:
        # hugetlbfs has no write(): the nonce cannot be put there without huge
        # pages, and the server must refuse the memfd before reading it anyway.
        fds["on hugetlbfs"] = _memfd("openenv-ws-obs", 2 << 20, SIZE_SEALS, flags=os.MFD_HUGETLB)
    except OSError as exc:
        # A kernel without hugetlbfs refuses to make one: nothing to offer.
        assert exc.errno in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP), exc
    try:
        with hostile_server() as server, Neighbour(server) as neighbour:
            rss = server.rss()
            answers = {
                what: _answer(server, f"{os.getpid()} {fd} {nonce.hex()}")
                for what, fd in fds.items()
            }
            assert answers == dict.fromkeys(fds, (101, REFUSED))
            assert_contained(server, neighbour, rss_before=rss)
    finally:
        for fd in fds.values():
            os.close(fd)
