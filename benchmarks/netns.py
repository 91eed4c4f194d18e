"""A private "remote host" for the benchmarks: a network namespace joined by a veth pair.

:func:`namespace_link` creates a network namespace and a veth pair (one end
in the namespace, one here) with a private ``/30`` in ``10.213.0.0/16`` that
overlaps no address or route of this host, and removes both when its block
ends, however it ends (an exception, Ctrl-C, SIGTERM). Names carry this
process's id, so parallel runs do not collide, and :func:`clean_stale` removes
what runs that died without cleaning up (SIGKILL) left under the same prefix.
:func:`shape` rate-limits both ends with ``tbf``; :func:`Link.counters` reads
the bytes the host's end of the pair moved.

Everything needs root (``CAP_NET_ADMIN``) and the ``ip`` and ``tc`` tools:
:func:`unavailable` says what is missing.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import os
import re
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import FrameType

__all__ = [
    "PREFIX",
    "Link",
    "clean_stale",
    "leftovers",
    "namespace_link",
    "owned_by",
    "shape",
    "unavailable",
]

#: The prefix of every namespace and interface this module creates.
PREFIX = "oewr"
#: Where the /30 subnets come from.
POOL = ipaddress.IPv4Network("10.213.0.0/16")

_NAMESPACE = re.compile(rf"^{PREFIX}-(?P<pid>\d+)-\d+$")
_DEVICE = re.compile(rf"^{PREFIX}(?P<pid>\d+)[hn]\d$")
_sequence = itertools.count()


@dataclass(frozen=True)
class Link:
    """A namespace and the veth pair joining it to this one."""

    namespace: str
    host_dev: str
    ns_dev: str
    host_ip: str
    ns_ip: str

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` run inside the namespace."""
        return ["ip", "netns", "exec", self.namespace, *argv]

    def counters(self) -> tuple[int, int]:
        """(received, sent) bytes of this host's end of the pair so far (Ethernet frames)."""
        base = f"/sys/class/net/{self.host_dev}/statistics"
        with open(f"{base}/rx_bytes") as rx, open(f"{base}/tx_bytes") as tx:
            return int(rx.read()), int(tx.read())


def unavailable() -> str | None:
    """None when namespaces can be made here, else the sentence saying why not."""
    if os.geteuid() != 0:
        return "it needs root (network namespaces, veth pairs and tc qdiscs)"
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        return f"it needs the {' and '.join(missing)} tool(s) (iproute2) on PATH"
    if not os.path.exists("/proc/self/ns/net"):
        return "this kernel has no network namespaces"
    return None


def _run(argv: Sequence[str]) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise OSError(f"`{' '.join(argv)}` failed: {done.stderr.strip() or done.returncode}")
    return done.stdout


def _quiet(argv: Sequence[str]) -> None:
    subprocess.run(list(argv), capture_output=True, timeout=30, check=False)


def _dead(pid: int) -> bool:
    return not os.path.exists(f"/proc/{pid}")


def _ours() -> Iterator[tuple[str, str, int]]:
    """("netns" or "link", name, pid of the process that made it) of this prefix's."""
    for line in _run(["ip", "netns", "list"]).splitlines():
        name = line.split()[0] if line.split() else ""
        if match := _NAMESPACE.match(name):
            yield "netns", name, int(match["pid"])
    for line in _run(["ip", "-o", "link", "show"]).splitlines():
        fields = line.split(":", 2)
        name = fields[1].strip().split("@")[0] if len(fields) > 2 else ""
        if match := _DEVICE.match(name):
            yield "link", name, int(match["pid"])


def owned_by(pid: int) -> list[str]:
    """The namespaces and interfaces of this prefix that process `pid` made and still has."""
    return [name for _, name, owner in _ours() if owner == pid]


def leftovers() -> list[tuple[str, str]]:
    """("netns" or "link", name) of this prefix's whose process is gone."""
    return [(kind, name) for kind, name, owner in _ours() if _dead(owner)]


def clean_stale() -> list[str]:
    """Remove :func:`leftovers` (what runs killed before cleaning up left); their names."""
    removed = []
    for kind, name in leftovers():
        _quiet(["ip", kind, "del", name])
        removed.append(name)
    return removed


def _taken() -> list[ipaddress.IPv4Network]:
    """The IPv4 networks this host already has addresses or routes in."""
    nets = []
    text = _run(["ip", "-4", "-o", "addr", "show"]) + _run(["ip", "-4", "route", "show"])
    for word in text.split():
        with contextlib.suppress(ValueError):
            nets.append(ipaddress.ip_network(word, strict=False))
    return [n for n in nets if isinstance(n, ipaddress.IPv4Network)]


def _subnet(start: int) -> ipaddress.IPv4Network:
    taken = _taken()
    subnets: list[ipaddress.IPv4Network] = list(POOL.subnets(new_prefix=30))
    for i in range(len(subnets)):
        candidate = subnets[(start + i) % len(subnets)]
        if not any(candidate.overlaps(net) for net in taken):
            return candidate
    raise OSError(f"no free /30 left in {POOL}")


@contextlib.contextmanager
def _terminate_as_exit() -> Iterator[None]:
    """Turn SIGTERM into SystemExit for the block, so ``finally`` clauses run on it too."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    before = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


@contextlib.contextmanager
def namespace_link() -> Iterator[Link]:
    """A new namespace joined to this one by a veth pair; both removed when the block ends."""
    pid, seq = os.getpid(), next(_sequence) % 10
    net = _subnet(pid * 10 + seq)
    host_ip, ns_ip = (str(a) for a in net.hosts())
    link = Link(
        f"{PREFIX}-{pid}-{seq}", f"{PREFIX}{pid}h{seq}", f"{PREFIX}{pid}n{seq}", host_ip, ns_ip
    )
    with _terminate_as_exit():
        try:
            _run(["ip", "netns", "add", link.namespace])
            _run(["ip", "link", "add", link.host_dev, "type", "veth", "peer", "name", link.ns_dev])
            _run(["ip", "link", "set", link.ns_dev, "netns", link.namespace])
            _run(["ip", "addr", "add", f"{host_ip}/30", "dev", link.host_dev])
            _run(link.command(["ip", "addr", "add", f"{ns_ip}/30", "dev", link.ns_dev]))
            _run(["ip", "link", "set", link.host_dev, "up"])
            _run(link.command(["ip", "link", "set", link.ns_dev, "up"]))
            _run(link.command(["ip", "link", "set", "lo", "up"]))
            yield link
        finally:
            # Deleting either end of a veth pair deletes both; the namespace goes with its name
            # once no process runs in it (the caller stops its servers before this).
            _quiet(["ip", "netns", "del", link.namespace])
            _quiet(["ip", "link", "del", link.host_dev])


def shape(link: Link, rate_bits: int, burst_bytes: int, latency_ms: float = 50.0) -> None:
    """Rate-limit both ends of `link` with ``tbf``: `rate_bits` per second, a bucket of
    `burst_bytes` (sent at the veth's own speed after an idle spell), packets queued at
    most `latency_ms` before being dropped."""
    qdisc = [
        "tc", "qdisc", "replace", "dev", "{dev}", "root", "tbf",
        "rate", f"{rate_bits}bit",
        "burst", f"{burst_bytes}b",
        "latency", f"{latency_ms:g}ms",
    ]  # fmt: skip
    _run([link.host_dev if a == "{dev}" else a for a in qdisc])
    _run(link.command([link.ns_dev if a == "{dev}" else a for a in qdisc]))
