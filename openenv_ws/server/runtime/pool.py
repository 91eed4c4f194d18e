"""Warm environments: built ahead of time per configuration, handed to new sessions.

Building an environment can be slow (an Atari ROM load takes ~0.1 s), and a
session waits for it before its first observation. A :class:`WarmPool` keeps
up to ``size`` unused environments per configuration key and rebuilds them
on a background thread as sessions take them, so ``open`` costs a dictionary
lookup. A pooled environment is exactly what the factory would have built at
that moment, so resets behave the same whether a session got a pooled or a
fresh one: either it was never used, or a session gave it back when it ended
(:meth:`WarmPool.give_back`) and it returned to that state itself
(:meth:`Environment.recycle`, which for Atari restores the post-load state
with new random seeds instead of loading the ROM again). Environments given
back are what keep the pool full while sessions come and go (one per
episode): the background builds, each of which pauses the event loop, are
then only needed when more sessions run at once than ever before.

Which configurations are kept warm: those the operator gives as ``warm`` up
front, plus every configuration whose environment a session built and then
gave back cleanly (it built, ran and recycled: a config that fails, hangs or
raises is never kept, and a client cannot make the pool build one it
chose), at most ``max_keys`` of them, least recently used dropped first. What
the pool holds is bounded in bytes too (``max_bytes``, each environment
charged its footprint, see :mod:`openenv_ws.footprint`).

With ale-py the ROM load holds the GIL, so a background build still pauses
the worker's event loop for its duration (~0.1 s). The pool therefore builds
one environment at a time, and only once no session has taken one for
``refill_delay`` seconds: the sessions just opened get their first replies
first. What it removes is the wait of the session being opened.
"""

from __future__ import annotations

import collections
import json
import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

from ..._logsafe import escape_controls
from ...environment import EnvFactory, Environment, VectorFactory
from ...footprint import session_footprint

__all__ = ["POOL_SHARE", "KeyFunction", "WarmPool", "json_key", "normalized_key"]

logger = logging.getLogger("openenv_ws.server.pool")

#: A server's pool holds at most 1/POOL_SHARE of its memory budget (``create_app``).
POOL_SHARE = 8

#: Maps an ``open`` config to the key of interchangeable environments (raise for a bad config).
KeyFunction = Callable[[Mapping[str, Any]], Hashable]


def json_key(config: Mapping[str, Any]) -> Hashable:
    """The default key: the config as canonical JSON (equal maps, equal keys)."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"), default=repr)


def normalized_key(normalize: Callable[[Mapping[str, Any]], Mapping[str, Any]]) -> KeyFunction:
    """A key function that compares configs after `normalize` (e.g. ``atari.normalize_config``).

    Configs the normalizer refuses are not pooled; the factory refuses them as usual.
    """

    def key(config: Mapping[str, Any]) -> Hashable:
        return json_key(normalize(config))

    return key


class WarmPool:
    """Ready-built environments per configuration, refilled in the background.

    Args:
        factory: builds an environment from a config (the server's env factory).
        size: environments kept ready per configuration (0 disables the pool).
        key: maps a config to the key of interchangeable environments; configs
            with equal keys share warm environments. Defaults to :func:`json_key`;
            for Atari, ``normalized_key(atari.normalize_config)`` makes
            ``{}`` and ``{"game": "pong"}`` share. A key function that raises
            marks the config as not poolable: the factory then builds (and
            refuses) it as usual.
        warm: configurations to build ahead of any session.
        max_keys: most configurations kept warm at once.
        refill_delay: seconds without a session taking an environment before
            the pool builds again. A build that holds the GIL (an ale-py ROM
            load) pauses the event loop, so it waits until a burst of opens
            (and the first requests of those sessions) is over.
        recycle: take back the environments of sessions that end (see
            :meth:`give_back`); False hands out only never-used ones.
        build_share: the largest fraction of time the background builds
            take: after a build of ``d`` seconds the next waits
            ``d * (1 / build_share - 1)`` (1: back to back). A build that holds
            the GIL pauses every session of the process for its duration.
        max_bytes: most memory the ready environments take together, each
            charged the footprint of its config (None: no bound).

    Use the pool (or :meth:`factory`) where an :data:`~openenv_ws.environment.EnvFactory`
    is expected; sessions made with the pool itself give their environments
    back to it. Call :meth:`start` once serving starts and :meth:`close` at
    shutdown (the refill thread also starts on first use).
    """

    def __init__(
        self,
        factory: EnvFactory,
        *,
        size: int = 2,
        key: KeyFunction | None = None,
        warm: Iterable[Mapping[str, Any]] = (),
        max_keys: int = 8,
        refill_delay: float = 1.0,
        recycle: bool = True,
        build_share: float = 1.0,
        max_bytes: int | None = None,
    ) -> None:
        if size < 0 or max_keys < 1:
            raise ValueError(f"size must be >= 0 and max_keys >= 1, got {size} and {max_keys}")
        if not 0 < build_share <= 1:
            raise ValueError(f"build_share must be in (0, 1], got {build_share}")
        self.build_share = build_share
        self._build = factory
        #: The factory's vector engine, if it has one: vector sessions are not pooled.
        self.vector: VectorFactory | None = getattr(factory, "vector", None)
        #: The factory's builds may run off the event loop (see ``EnvPlugin``).
        self.build_off_loop = bool(getattr(factory, "build_off_loop", False))
        #: What a session of a config takes (see ``EnvPlugin.footprint``).
        self.footprint = getattr(factory, "footprint", None)
        self.size = size
        self.max_keys = max_keys
        self.refill_delay = refill_delay
        self.recycle = recycle
        self._last_take = -float("inf")
        self._key = key or json_key
        self._lock = threading.Condition()
        # key -> (config, ready environments), most recently used last.
        self._keys: collections.OrderedDict[Hashable, tuple[dict[str, Any], list[Environment]]]
        self._keys = collections.OrderedDict()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.max_bytes = max_bytes
        self._cost: dict[Hashable, int] = {}  # bytes of one environment of a key
        #: Bytes the ready environments take.
        self.held = 0
        self.hits = 0
        self.misses = 0
        self.built = 0
        self.failed = 0
        self.recycled = 0
        for config in warm:
            self._want(dict(config))

    # ------------------------------------------------------------------ the factory

    def factory(self, config: dict[str, Any]) -> Environment:
        """A warm environment for `config` if one is ready, else one built now."""
        key = self._pooled_key(config)
        if key is not None:
            with self._lock:
                self._last_take = time.monotonic()
                entry = self._keys.get(key)
                env = None
                if entry is not None:
                    self._keys.move_to_end(key)
                    if entry[1]:
                        env = entry[1].pop(0)
                        self.held -= self._cost.get(key, 0)
                if env is not None:
                    self.hits += 1
                else:
                    self.misses += 1
                self._lock.notify()
            self._ensure_thread()
            if env is not None:
                return env
        return self._build(config)

    __call__ = factory

    def give_back(self, config: Mapping[str, Any], env: Environment) -> None:
        """Take back the environment of a session that ended normally with `config`.

        It is kept warm if its configuration has room for one and it recycles
        (:meth:`Environment.recycle`); otherwise it is closed. Never raises.
        """
        key = self._pooled_key(config) if self.recycle else None
        if key is not None and self._has_room(key, config) and _recycled(env):
            with self._lock:
                if not self._closed and self._has_room(key, config):
                    self._want(dict(config), key)[1].append(env)
                    self.held += self._cost[key]
                    self.recycled += 1
                    self._lock.notify()  # a key kept for the first time is refilled too
                    return
        _close_all([env])

    def _pooled_key(self, config: Mapping[str, Any]) -> Hashable | None:
        """The pool key of `config`; None if the pool is off or closed, or the config
        is not poolable (the factory reports a bad config itself)."""
        if not self.size or self._closed:
            return None
        try:
            return self._key(config)
        except Exception:  # noqa: BLE001 - not poolable
            return None

    def _has_room(self, key: Hashable, config: Mapping[str, Any] | None = None) -> bool:
        """Whether one more environment of `key` may be kept: below ``size`` for its key
        and within ``max_bytes``. A key not kept yet has room when `config` is given
        (a session giving one back) and its footprint fits."""
        with self._lock:  # re-entrant: a Condition over an RLock
            entry = self._keys.get(key)
            if entry is None and config is None:
                return False
            if entry is not None and len(entry[1]) >= self.size:
                return False
            return self.max_bytes is None or self.held + self._bytes(key, config) <= self.max_bytes

    def _bytes(self, key: Hashable, config: Mapping[str, Any] | None) -> int:
        """Bytes one environment of `key` is charged (its config's footprint)."""
        cost = self._cost.get(key)
        if cost is None:
            try:
                cost = session_footprint(self._build, config or {}, None, None).bytes
            except Exception:  # noqa: BLE001 - a config the plugin refuses is never kept
                cost = self.max_bytes + 1 if self.max_bytes is not None else 0
            self._cost[key] = cost
        return cost

    def _want(
        self, config: dict[str, Any], key: Hashable | None = None
    ) -> tuple[dict[str, Any], list[Environment]]:
        """Mark `config` as one to keep warm (most recently used); caller holds the lock or is init."""
        if key is None:
            key = self._key(config)
        self._bytes(key, config)
        entry = self._keys.get(key)
        if entry is None:
            entry = self._keys[key] = (dict(config), [])
            while len(self._keys) > self.max_keys:
                old, (_, dropped) = self._keys.popitem(last=False)
                self.held -= self._cost.pop(old, 0) * len(dropped)
                _close_all(dropped)
        else:
            self._keys.move_to_end(key)
        return entry

    # ------------------------------------------------------------------ background refill

    def start(self) -> WarmPool:
        """Start building the warm environments (idempotent)."""
        self._ensure_thread()
        return self

    def _ensure_thread(self) -> None:
        if self._thread is None and self.size and not self._closed:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._refill_forever, name="openenv-ws-warm-pool", daemon=True
                    )
                    self._thread.start()

    def _next_to_build(self) -> tuple[Hashable, dict[str, Any]] | None:
        # The most recently used configuration first.
        for key in reversed(self._keys):
            config = self._keys[key][0]
            if self._has_room(key):
                return key, config
        return None

    def _refill_forever(self) -> None:
        while True:
            with self._lock:
                job = self._next_to_build()
                while not self._closed:
                    quiet = time.monotonic() - self._last_take
                    if job is not None and quiet >= self.refill_delay:
                        break
                    self._lock.wait(None if job is None else self.refill_delay - quiet)
                    job = self._next_to_build()
                if self._closed:
                    return
            assert job is not None
            key, config = job
            start = time.monotonic()
            try:
                env = self._build(dict(config))
            except Exception as exc:  # noqa: BLE001 - a config that fails is dropped, not retried
                logger.warning(
                    "warm pool: building %s failed (%s); not keeping it warm",
                    escape_controls(str(key))[:200],
                    escape_controls(str(exc))[:200],
                )
                with self._lock:
                    self.failed += 1
                    dropped = self._keys.pop(key, None)
                    if dropped is not None:
                        self.held -= self._cost.get(key, 0) * len(dropped[1])
                        _close_all(dropped[1])
                continue
            with self._lock:
                entry = self._keys.get(key)
                if self._closed or entry is None or not self._has_room(key):
                    keep = False
                else:
                    entry[1].append(env)
                    self.held += self._cost.get(key, 0)
                    self.built += 1
                    keep = True
            if not keep:
                env.close()
            self._rest(time.monotonic() - start)

    def _rest(self, build_seconds: float) -> None:
        """Keep background builds to ``build_share`` of the time (returns early on close)."""
        rest = build_seconds * (1 / self.build_share - 1)
        if rest > 0:
            with self._lock:
                if not self._closed:
                    self._lock.wait(rest)

    # ------------------------------------------------------------------ state

    def ready(self, config: Mapping[str, Any] | None = None) -> int:
        """Environments ready now (for `config`, or in total)."""
        with self._lock:
            if config is None:
                return sum(len(ready) for _, ready in self._keys.values())
            entry = self._keys.get(self._key(config))
            return 0 if entry is None else len(entry[1])

    def wait_ready(self, config: Mapping[str, Any] | None = None, *, timeout: float = 10.0) -> bool:
        """Block until `config` (or every warm configuration) has ``size`` ready; False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                entries = (
                    list(self._keys.values())
                    if config is None
                    else [self._keys.get(self._key(config), ({}, []))]
                )
                if all(len(ready) >= self.size for _, ready in entries):
                    return True
            time.sleep(0.005)
        return False

    def stats(self) -> dict[str, Any]:
        """Counters for ``/health``: size, ready, configurations, hits, misses, builds, recycled."""
        with self._lock:
            return {
                "size": self.size,
                "ready": sum(len(ready) for _, ready in self._keys.values()),
                "configs": len(self._keys),
                "hits": self.hits,
                "misses": self.misses,
                "built": self.built,
                "failed": self.failed,
                "recycled": self.recycled,
                "bytes": self.held,
                "max_bytes": self.max_bytes,
            }

    def close(self) -> None:
        """Stop refilling and close every unused environment. Idempotent."""
        with self._lock:
            self._closed = True
            leftovers = [env for _, ready in self._keys.values() for env in ready]
            for _, ready in self._keys.values():
                ready.clear()
            self.held = 0
            self._lock.notify_all()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)
        _close_all(leftovers)


def _recycled(env: Environment) -> bool:
    try:
        return env.recycle()
    except Exception:  # an environment that cannot recycle is closed instead
        logger.warning("warm pool: recycling an environment failed; closing it", exc_info=True)
        return False


def _close_all(envs: list[Environment]) -> None:
    for env in envs:
        try:
            env.close()
        except Exception:  # closing spare environments is best effort
            logger.debug("warm pool: closing an unused environment failed", exc_info=True)
