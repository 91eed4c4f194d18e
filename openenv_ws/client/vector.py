"""Many remote sessions behind one object: batched ``step`` and EnvPool-style ``send``/``recv``.

A server steps the sessions it hosts one after another, so throughput comes
from keeping every session's next request in flight: :meth:`VectorEnvClient.send`
writes requests without waiting, :meth:`VectorEnvClient.recv` hands back
whichever sessions have answered. Each session is one
:class:`~openenv_ws.client._ws.BlockingWebSocket`; one ``selectors`` object
waits on all of them; observations go from the socket buffers into one preallocated
``(num_envs, *obs_shape)`` array (structured ones stacked as ``gymnasium.vector`` does).

Autoreset follows ``gymnasium.vector.AutoresetMode``: ``"next_step"`` (default: the step
after an episode's last ignores its action and returns the next episode's first observation,
reward 0, flags false), ``"same_step"`` (the ending step resets at once; its last observation
and info are in ``infos["final_obs"]`` and ``infos["final_info"]``) or ``"disabled"`` (reset
ended envs with ``reset(env_ids=...)`` before stepping them again).
"""

from __future__ import annotations

import contextlib
import itertools
import selectors
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Unpack

import numpy as np

from ..autoreset import AUTORESET_MODES, Autoreset, parse_autoreset_mode
from ..environment import EnvSpec
from ..errors import EnvConfigError, InvalidState, RemoteEnvError, RequestTimeout, SessionClosed
from ..protocol import Result, encode, encode_step
from ._batch import (
    Arrival,
    Batcher,
    StepBatch,
    action_splitter,
    seeds_for,
)
from ._core import DEFAULT, check_observation_bytes
from ._idle import CallGuard, keep_alive
from ._slot import EnvSlot, Pending
from ._ws import NOT_READY, normalize_url
from .options import BlockingOptions, ClientOptions

__all__ = ["AUTORESET_MODES", "VectorEnvClient"]

#: Opens a client leaves unanswered at once while opening its sessions.
OPENS_IN_FLIGHT = 32


class VectorEnvClient:
    """``num_envs`` sessions, stepped together or asynchronously.

    Example::

        with VectorEnvClient("ws://127.0.0.1:8000", 16, config={"game": "pong"}) as envs:
            obs, infos = envs.reset(seed=0)          # obs: (16, 210, 160, 3) uint8
            obs, rewards, terminations, truncations, infos = envs.step(actions)

            envs.send(actions)                       # EnvPool style: all 16 in flight
            obs, rewards, terminations, truncations, infos = envs.recv()
            ids = infos["env_id"]                    # which envs these rows belong to
            envs.send(policy(obs), ids)

    Args:
        urls: one server URL or several; env ``i`` opens its session on
            ``urls[i % len(urls)]``.
        num_envs: number of sessions (default: one per URL).
        config: the environment configuration of every session.
        configs: one configuration per env instead (all must share the
            observation and action spaces).
        autoreset_mode: ``"next_step"`` (default), ``"same_step"`` or ``"disabled"``.
        copy: return copies of the observation buffer (True, default) or the
            preallocated buffer itself, valid until the next call (False).
        **options: as :class:`~openenv_ws.client.EnvClient`'s, for each
            session (``open_timeout``, 60 s by default, is for all of them;
            ``timeout`` is what :meth:`recv` and :meth:`step` wait; ``resume``:
            an env whose connection drops without the server ending its session
            is resumed, its request in flight re-sent, while the other envs wait;
            no step is lost or applied twice).

    Raises:
        ServerUnavailable: a server does not answer.
        RemoteEnvError: a server refused the configuration.
        EnvConfigError: the sessions do not share their observation/action spaces.
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        num_envs: int | None = None,
        *,
        config: Mapping[str, Any] | None = None,
        configs: Sequence[Mapping[str, Any]] | None = None,
        autoreset_mode: Any = "next_step",
        copy: bool = True,
        **options: Unpack[BlockingOptions],
    ) -> None:
        url_list = [normalize_url(u) for u in ([urls] if isinstance(urls, str) else urls)]
        opts = ClientOptions.of(type(self).__name__, options, open_timeout=60.0)
        tls = opts.tls(url_list)
        if not url_list:
            raise ValueError("urls is empty; pass at least one server URL")
        if configs is not None:
            if config is not None:
                raise ValueError("pass config or configs, not both")
            if num_envs is not None and num_envs != len(configs):
                raise ValueError(f"num_envs={num_envs} but {len(configs)} configs were given")
            num_envs = len(configs)
        n = len(url_list) if num_envs is None else num_envs
        if n < 1:
            raise ValueError(f"num_envs must be at least 1, got {n}")
        mode = parse_autoreset_mode(autoreset_mode, AUTORESET_MODES)
        self.num_envs = n
        self.urls = [url_list[i % len(url_list)] for i in range(n)]
        self.autoreset_mode = mode
        self._autoreset = Autoreset(mode, n)
        self.timeout = opts.timeout
        self.busy_poll = opts.busy_poll
        self.open_timeout = open_timeout = opts.open_timeout
        self.resume_timeout = opts.resume_seconds
        self.closed = False
        per_env = list(configs) if configs is not None else [config or {}] * n
        # Held around each call; the heartbeat thread answers pings only when it is free.
        self._guard = CallGuard()
        self._selector = selectors.DefaultSelector()
        self._slots: list[EnvSlot] = []
        for i, (url, env_config) in enumerate(zip(self.urls, per_env, strict=True)):
            core = opts.core(env_config)
            core.offer_shared_memory(url, opts.shared_memory)
            core.offer_compression(url, opts.compression, opts.delta)
            self._slots.append(
                EnvSlot(
                    i,
                    url,
                    core,
                    self._selector,
                    self._guard,
                    open_timeout=open_timeout,
                    resume_timeout=self.resume_timeout,
                    ssl_context=tls,
                )
            )
        # Replies read but not yet handed out by recv(), in arrival order.
        self._inbox: list[Arrival] = []
        self._errors: list[tuple[int, BaseException]] = []
        try:
            self._open_all(open_timeout)
            # Each env's reply is within the limit; the batch of all of them must be too.
            check_observation_bytes(self.spec.observation, n, opts.max_frame_size)
        except BaseException:
            self._abort()
            raise
        for slot in self._slots:
            keep_alive(slot.conn)
        spec = self.spec
        self._batcher = Batcher(n, spec.observation, copy=copy)
        self._split = action_splitter(spec.action)

    # ------------------------------------------------------------------ opening

    def _open_all(self, open_timeout: float | None) -> None:
        deadline = None if open_timeout is None else time.monotonic() + open_timeout
        # At most OPENS_IN_FLIGHT sessions open at once: a server refuses one address
        # more than 64 paced opens waiting (by default) and closes connections that
        # open nothing for a minute. Answers come from whichever socket is ready.
        unsent = iter(self._slots)

        def start(count: int) -> None:
            for slot in itertools.islice(unsent, count):
                slot.ws = slot.connect(_left(deadline))
                slot.conn.send(encode(slot.core.open_frame()))
                slot.register(slot.conn)

        start(OPENS_IN_FLIGHT)
        waiting = set(self._slots)
        while waiting:
            for key, _ in self._selector.select(_left(deadline)):
                slot = key.data
                try:
                    frame = slot.conn.recv_nowait(slot.core.decode)
                except SessionClosed as exc:
                    raise slot.named(exc) from None
                if frame is NOT_READY or slot not in waiting:
                    continue
                waiting.discard(slot)
                start(1)
                try:
                    slot.core.opened(frame)
                except RemoteEnvError as exc:
                    raise RemoteEnvError(
                        exc.code, f"env {slot.index} ({slot.url}): {exc.message}", fatal=exc.fatal
                    ) from None
        first = self.spec
        for slot in self._slots[1:]:
            spec = slot.core.spec
            assert spec is not None
            if spec.observation != first.observation or spec.action != first.action:
                raise EnvConfigError(
                    f"env {slot.index} has observation {spec.observation} and action "
                    f"{spec.action}, env 0 has {first.observation} and {first.action}; the "
                    "sessions of one vector client must share their spaces"
                )

    # ------------------------------------------------------------------ properties

    @property
    def spec(self) -> EnvSpec:
        """The spaces of one session (all sessions share them)."""
        spec = self._slots[0].core.spec
        assert spec is not None
        return spec

    @property
    def specs(self) -> list[EnvSpec]:
        """Each session's spec (their ``extra`` may differ, e.g. per-env configs)."""
        return [slot.core.spec for slot in self._slots]  # type: ignore[misc]

    @property
    def copy(self) -> bool:
        """Whether results are copies of the observation buffer (else the buffer itself)."""
        return self._batcher.copy

    @copy.setter
    def copy(self, value: bool) -> None:
        self._batcher.copy = value

    @property
    def session_ids(self) -> list[str]:
        """The server-side id of each session, by env id."""
        return [slot.core.session_id or "" for slot in self._slots]

    @property
    def pending(self) -> list[int]:
        """Env ids with a request in flight (sent and not yet returned by :meth:`recv`)."""
        return [slot.index for slot in self._slots if slot.pending is not Pending.IDLE]

    # ------------------------------------------------------------------ batched API

    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: Mapping[str, Any] | None = None,
        env_ids: Sequence[int] | np.ndarray[Any, Any] | None = None,
        timeout: float | None = DEFAULT,
    ) -> tuple[np.ndarray[Any, Any], dict[str, Any]]:
        """Reset envs (all, or ``env_ids``) and wait for their first observations.

        Args:
            seed: one int (env ``i`` gets ``seed + i``, as in Gymnasium), one
                seed per reset env, or None for unseeded resets.
            options: reset options sent to every reset env.
            env_ids: the envs to reset (default: all). Envs not reset keep
                their rows of the observation buffer.

        Returns:
            ``(obs, infos)``: obs for all ``num_envs`` rows, and infos in
            Gymnasium's vector layout (``infos[key]`` an array,
            ``infos["_" + key]`` the mask of envs that reported it).
        """
        ids = self._ids(env_ids)
        seeds = seeds_for(seed, ids, self.num_envs)
        busy = [i for i in ids if self._slots[i].pending is not Pending.IDLE]
        if busy:
            raise InvalidState(
                f"envs {busy} have a request in flight; recv() their results before resetting"
            )
        guard = self._guard
        guard.lock.acquire()
        guard.calls += 1
        try:
            for i, s in zip(ids, seeds, strict=True):
                self._send_reset(self._slots[i], s, dict(options or {}), Pending.RESET)
            arrivals = self._gather(ids, timeout)
        finally:
            guard.lock.release()
        return self._batcher.batch(arrivals, by_id=True)[0::4]

    def step(
        self, actions: Sequence[Any] | np.ndarray[Any, Any], *, timeout: float | None = DEFAULT
    ) -> StepBatch:
        """Step every env with its action and wait for all of them.

        Returns:
            ``(obs, rewards, terminations, truncations, infos)``, one row per env.

        Raises:
            ValueError: ``actions`` is not one action per env (shape ``(num_envs,)``).
        """
        ids = list(range(self.num_envs))
        guard = self._guard
        guard.lock.acquire()
        guard.calls += 1
        try:
            self._send(actions, ids)
            arrivals = self._gather(ids, timeout)
        finally:
            guard.lock.release()
        return self._batcher.batch(arrivals, by_id=True)

    # ------------------------------------------------------------------ asynchronous API

    def send(
        self,
        actions: Sequence[Any] | np.ndarray[Any, Any],
        env_ids: Sequence[int] | np.ndarray[Any, Any] | None = None,
    ) -> None:
        """Send one action to each env in ``env_ids`` (default: all) and return at once.

        An env that ended its episode in next-step mode is reset instead (its
        action is ignored). Each env takes one request at a time: sending to
        an env whose previous result has not been received is refused.

        Raises:
            InvalidState: an env has a request in flight, or the client is closed.
            ValueError: ``actions`` is not one action per env of ``env_ids``.
        """
        guard = self._guard
        guard.lock.acquire()
        guard.calls += 1
        try:
            self._send(actions, env_ids)
        finally:
            guard.lock.release()

    def _send(
        self,
        actions: Sequence[Any] | np.ndarray[Any, Any],
        env_ids: Sequence[int] | np.ndarray[Any, Any] | None,
    ) -> None:
        ids = self._ids(env_ids)
        acts = self._split(actions, len(ids))
        slots = [self._slots[i] for i in ids]
        for slot in slots:
            if slot.pending is not Pending.IDLE:
                raise InvalidState(
                    f"env {slot.index} already has a request in flight; recv() its result "
                    "before sending it another action"
                )
        step_is_reset = self._autoreset.step_is_reset
        for slot, action in zip(slots, acts, strict=True):
            if step_is_reset(slot.index):
                self._send_reset(slot, None, {}, Pending.AUTORESET)
                continue
            rid = slot.core.next_id()
            slot.transmit(rid, encode_step(rid, action), Pending.STEP)

    def recv(
        self,
        *,
        min_envs: int = 1,
        max_envs: int | None = None,
        timeout: float | None = DEFAULT,
    ) -> StepBatch:
        """Results of envs that have answered: at least ``min_envs``, at most ``max_envs``.

        Waits until ``min_envs`` results are there, then also takes every
        other result already received, without waiting for more.

        Returns:
            ``(obs, rewards, terminations, truncations, infos)`` with one row
            per returned env, in arrival order; ``infos["env_id"]`` holds the
            env ids of the rows.

        Raises:
            InvalidState: fewer than ``min_envs`` envs have a request in flight.
            RequestTimeout: ``min_envs`` results did not arrive in time.
            RemoteEnvError: a request failed (the message names the env);
                other envs' results stay queued for the next call.
        """
        self._check_errors()
        in_flight = sum(slot.pending is not Pending.IDLE for slot in self._slots)
        if min_envs > in_flight:
            raise InvalidState(
                f"recv(min_envs={min_envs}) but only {in_flight} envs have a request in "
                "flight; send() actions first"
            )
        wait = self.timeout if timeout is DEFAULT else timeout
        deadline = None if wait is None else time.monotonic() + wait
        inbox = self._inbox
        guard = self._guard
        guard.lock.acquire()
        guard.calls += 1
        try:
            self._poll(lambda: len(inbox) >= min_envs, deadline, raise_errors=True)
        finally:
            guard.lock.release()
        limit = len(self._inbox) if max_envs is None else max_envs
        arrivals, self._inbox = self._inbox[:limit], self._inbox[limit:]
        return self._batcher.batch(self._deliver(arrivals), by_id=False)

    # ------------------------------------------------------------------ I/O

    @staticmethod
    def _send_reset(
        slot: EnvSlot, seed: int | None, options: dict[str, Any], kind: Pending
    ) -> None:
        frame = slot.core.reset_frame(seed, None, options)
        slot.transmit(frame.id, encode(frame), kind)

    def _gather(self, ids: list[int], timeout: float | None) -> list[Arrival]:
        """Wait until every env in ``ids`` has answered; return their results.

        If some requests failed, the others' results are dropped with them and
        the first failure is raised (the others are added to it as notes).
        """
        wait = self.timeout if timeout is DEFAULT else timeout
        deadline = None if wait is None else time.monotonic() + wait
        wanted = set(ids)

        def settled() -> bool:
            answered = sum(1 for a in self._inbox if a[0] in wanted)
            failed = sum(1 for e in self._errors if e[0] in wanted)
            return answered + failed >= len(wanted)

        self._poll(settled, deadline, raise_errors=False)
        mine = [a for a in self._inbox if a[0] in wanted]
        self._inbox = [a for a in self._inbox if a[0] not in wanted]
        self._deliver(mine)
        failed = sorted((e for e in self._errors if e[0] in wanted), key=lambda e: e[0])
        if failed:
            self._errors = [e for e in self._errors if e[0] not in wanted]
            first = self._slots[failed[0][0]].named(failed[0][1])
            for j, other in failed[1:]:
                first.add_note(f"also: {self._slots[j].named(other)}")
            raise first
        return mine

    def _deliver(self, arrivals: list[Arrival]) -> list[Arrival]:
        slots = self._slots
        for a in arrivals:
            slots[a[0]].pending = Pending.IDLE
        return arrivals

    def _poll(
        self, done: Callable[[], bool], deadline: float | None, *, raise_errors: bool
    ) -> None:
        """Read replies into the inbox until ``done()``; raise failures as they come if asked."""
        check = self._check_errors if raise_errors else lambda: None
        check()
        # Bytes already buffered need no system call; drain them first.
        for slot in self._slots:
            if slot.awaiting and slot.conn.buffered:
                self._read(slot)
        select = self._selector.select
        while not done():
            check()
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise RequestTimeout(
                    "the env results did not arrive in time; they may still arrive and "
                    "will be returned by a later recv()"
                )
            ready = (self._spin() if self.busy_poll else None) or select(left)
            for key, _ in ready:
                self._read(key.data)
        check()

    def _spin(self) -> list[tuple[selectors.SelectorKey, int]]:
        # Polling without sleeping spares the server the cost of waking this
        # process for each reply (an inter-processor interrupt on most VMs).
        select = self._selector.select
        clock = time.perf_counter
        until = clock() + self.busy_poll
        ready = select(0)
        while not ready and clock() < until:
            ready = select(0)
        return ready

    def _read(self, slot: EnvSlot) -> None:
        """Take every whole reply the env's socket holds now."""
        while (reply := slot.next_reply()) is not None:
            if type(reply) is Result:
                self._arrive(slot, reply)
            else:
                self._errors.append((slot.index, reply))  # type: ignore[arg-type]

    def _arrive(self, slot: EnvSlot, frame: Result) -> None:
        kind = slot.pending
        if kind is Pending.FINAL_RESET:
            step, slot.final = slot.final, None
            assert step is not None
            merged = Result(
                frame.id, frame.obs, step.reward, step.terminated, step.truncated, True, frame.info
            )
            self._inbox.append((slot.index, merged, (step.obs, step.info)))
            return
        if self._autoreset.ended(slot.index, frame.done) and kind is Pending.STEP:
            # Keep the final step; its row is completed by the reset's observation.
            slot.final = frame
            self._send_reset(slot, None, {}, Pending.FINAL_RESET)
            return
        if kind is Pending.AUTORESET:
            frame = Result(frame.id, frame.obs, 0.0, False, False, False, frame.info)
        self._inbox.append((slot.index, frame, None))

    def _check_errors(self) -> None:
        if self._errors:
            i, exc = self._errors.pop(0)
            raise self._slots[i].named(exc) from None

    # ------------------------------------------------------------------ helpers

    def _ids(self, env_ids: Sequence[int] | np.ndarray[Any, Any] | None) -> list[int]:
        if self.closed:
            raise InvalidState("the vector client is closed; create a new one", code="closed")
        if env_ids is None:
            return list(range(self.num_envs))
        ids = env_ids.tolist() if isinstance(env_ids, np.ndarray) else list(env_ids)
        if isinstance(env_ids, np.ndarray) and env_ids.dtype == np.bool_:
            ids = [i for i, m in enumerate(ids) if m]
        for i in ids:
            if type(i) is not int or not 0 <= i < self.num_envs:
                raise ValueError(f"env id {i!r} is not an integer in [0, {self.num_envs})")
        if len(set(ids)) != len(ids):
            raise ValueError(f"env ids {ids} repeat an env; each env takes one request at a time")
        return ids

    def close(self) -> None:
        """Close every session (best effort, in parallel). Idempotent."""
        if self.closed:
            return
        self.closed = True
        with self._guard.lock:
            for slot in self._slots:
                if slot.ws is not None and not slot.ws.closed:
                    with contextlib.suppress(Exception):  # closing is best effort
                        slot.ws.send(encode(slot.core.close_frame()))
            for slot in self._slots:
                slot.close(timeout=2.0)
                slot.core.release()
        self._selector.close()

    def _abort(self) -> None:
        self.closed = True
        for slot in self._slots:
            slot.close(timeout=0.5)
            slot.core.release()
        self._selector.close()

    def __enter__(self) -> VectorEnvClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "closed", True):
            self._abort()

    def __repr__(self) -> str:
        hosts = sorted(set(getattr(self, "urls", ())))
        mode = getattr(self, "autoreset_mode", None)
        return f"VectorEnvClient(num_envs={getattr(self, 'num_envs', 0)}, urls={hosts}, autoreset={mode!r})"


def _left(deadline: float | None) -> float | None:
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise RequestTimeout("the sessions did not open in time (open_timeout)")
    return left
