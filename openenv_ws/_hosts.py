"""Which host names and addresses are this machine's loopback (one rule for the whole package)."""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback"]


def is_loopback(host: str | None) -> bool:
    """Whether `host` names this machine's loopback: ``localhost``, 127.0.0.0/8, ``::1``
    (also in brackets, and IPv4-mapped). Any other name is not, whatever it resolves to."""
    if not host:
        return False
    name = host.strip("[]").rstrip(".").lower()
    if name in ("localhost", "ip6-localhost"):
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)
