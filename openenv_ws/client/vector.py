"""Many remote sessions behind one object: batched ``step`` and EnvPool-style ``send``/``recv``.

A server steps the sessions it hosts one after another, so throughput comes
from keeping every session's next request in flight: :meth:`VectorEnvClient.send`
writes requests without waiting, :meth:`VectorEnvClient.recv` hands back
whichever sessions have answered. Each session is one
:class:`~openenv_ws.client._ws.BlockingWebSocket`; one ``selectors`` object
waits on all of them, and observations are copied straight from the socket
buffers into one preallocated ``(num_envs, *obs_shape)`` array.

Autoreset follows Gymnasium's vector environments (``gymnasium.vector.AutoresetMode``):

- ``"next_step"`` (Gymnasium's default): the step that ends an episode
  returns its last observation; the env's next ``step`` ignores its action,
  resets the env and returns the first observation of the new episode with
  reward 0 and both flags false.
- ``"same_step"``: the step that ends an episode resets the env at once and
  returns the new episode's first observation; the last one is in
  ``infos["final_obs"]`` and its info in ``infos["final_info"]``.
- ``"disabled"``: nothing is reset automatically; reset ended envs with
  ``reset(env_ids=...)`` before stepping them again.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..environment import ArraySpec, EnvSpec
from ..errors import (
    EnvConfigError,
    InvalidState,
    OpenEnvError,
    RemoteEnvError,
    RequestTimeout,
    SessionClosed,
)
from ..protocol import Close, Error, Reset, Result, encode, encode_step
from ._core import DEFAULT, ClientCore
from ._idle import CallGuard, keep_alive, read_last_words
from ._resume import Resumption, can_resume
from ._ws import NOT_READY, BlockingWebSocket, normalize_url
from .sync import reply_to

__all__ = ["AUTORESET_MODES", "VectorEnvClient"]

logger = logging.getLogger("openenv_ws.client")

#: Supported autoreset modes (the values of ``gymnasium.vector.AutoresetMode``).
AUTORESET_MODES = ("next_step", "same_step", "disabled")
# Also Gymnasium's spellings ("NextStep", ...), compared in lower case.
_MODES = {**{m: m for m in AUTORESET_MODES}, "nextstep": "next_step", "samestep": "same_step"}

# What an env's request in flight is (its reply is shaped accordingly).
_IDLE, _STEP, _RESET, _AUTORESET, _FINAL_RESET = 0, 1, 2, 3, 4
_Arrival = tuple[int, Result, Any]
Array = np.ndarray[Any, Any]
#: ``(observations, rewards, terminations, truncations, infos)``
StepBatch = tuple[Array, Array, Array, Array, dict[str, Any]]


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
        token: bearer token (default: ``OPENENV_WS_TOKEN``).
        open_timeout: seconds to connect and open all sessions.
        timeout: default seconds :meth:`recv` and :meth:`step` wait (None: no limit).
        max_frame_size: largest reply accepted, in bytes.
        busy_poll: seconds to poll the sockets without sleeping before
            waiting in the kernel (0: never spin). Spinning costs client CPU
            and spares the server a wake-up per reply.
        shared_memory: offer each server on this host (loopback URL) a shared
            memory region, so that large observations skip the socket (see
            :class:`~openenv_ws.client.EnvClient`).
        resume: when an env's connection drops without the server ending its
            session (reset, proxy restart, heartbeat timeout), reconnect, take
            the session back and re-send its request in flight, as
            :class:`~openenv_ws.client.EnvClient` does; the other envs wait
            meanwhile. No step is lost or applied twice.
        resume_timeout: seconds one env may take to resume before its
            session is given up (its next result raises ``SessionClosed``).
        indexed_frames: ask for RGB frames as palette indices, expanded by
            this client (see :class:`~openenv_ws.client.EnvClient`).

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
        token: str | None = None,
        open_timeout: float | None = 60.0,
        timeout: float | None = 60.0,
        max_frame_size: int = 64 << 20,
        busy_poll: float = 0.0,
        shared_memory: bool = True,
        resume: bool = True,
        resume_timeout: float = 30.0,
        indexed_frames: bool | None = None,
    ) -> None:
        url_list = (
            [normalize_url(urls)] if isinstance(urls, str) else list(map(normalize_url, urls))
        )
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
        mode = _MODES.get(str(getattr(autoreset_mode, "value", autoreset_mode)).lower())
        if mode is None:
            raise ValueError(
                f"autoreset_mode must be one of {', '.join(AUTORESET_MODES)} (or a "
                f"gymnasium.vector.AutoresetMode), got {autoreset_mode!r}"
            )
        self.num_envs = n
        self.urls = [url_list[i % len(url_list)] for i in range(n)]
        self.autoreset_mode = mode
        self.copy = copy
        self.timeout = timeout
        self.busy_poll = busy_poll
        self.open_timeout = open_timeout
        self.resume_timeout = resume_timeout if resume else 0.0
        self.closed = False
        per_env = list(configs) if configs is not None else [config or {}] * n
        self._cores = [
            ClientCore(c, token=token, max_frame_size=max_frame_size, indexed_frames=indexed_frames)
            for c in per_env
        ]
        for core, url in zip(self._cores, self.urls, strict=True):
            core.offer_shared_memory(url, shared_memory)
        self._ws: list[BlockingWebSocket] = []
        # Held around each call; the heartbeat thread answers pings only when it is free.
        self._guard = CallGuard()
        self._selector = selectors.DefaultSelector()
        # The descriptor each env's socket is registered with (-1: none).
        self._fds = [-1] * n
        # Each env's request in flight as sent, to re-send after a resume.
        self._requests = [b""] * n
        # What each env's request is, until its result is handed out (or _IDLE).
        self._pending = [_IDLE] * n
        # Whether the reply to it is still to come off the socket.
        self._awaiting = [False] * n
        self._rids = [0] * n
        self._needs_reset = [False] * n
        # Same-step mode: the step that ended an episode, held until its env has reset.
        self._final: dict[int, Result] = {}
        # Replies read but not yet handed out by recv(), in arrival order.
        self._inbox: list[_Arrival] = []
        self._errors: list[tuple[int, BaseException]] = []
        try:
            self._open_all(max_frame_size, open_timeout)
        except BaseException:
            self._abort()
            raise
        for ws in self._ws:
            keep_alive(ws)
        spec = self.spec
        assert isinstance(spec.observation, ArraySpec)
        shape = (n, *spec.observation.shape)
        self._obs = np.zeros(shape, spec.observation.dtype)
        # recv()'s rows in arrival order; made on first use (step() never needs it).
        self._batch_obs: np.ndarray[Any, Any] | None = None
        self._rewards = np.zeros(n, np.float64)
        self._terminations = np.zeros(n, np.bool_)
        self._truncations = np.zeros(n, np.bool_)

    # ------------------------------------------------------------------ opening

    def _open_all(self, max_frame_size: int, open_timeout: float | None) -> None:
        deadline = None if open_timeout is None else time.monotonic() + open_timeout
        for i, core in enumerate(self._cores):
            ws = BlockingWebSocket(
                self.urls[i],
                open_timeout=_left(deadline),
                headers=core.headers(),
                max_size=max_frame_size,
                guard=self._guard,
            )
            self._ws.append(ws)
            # A resumed session's connection offers the same region again.
            core.handshake_answered(ws.response_headers, keep_descriptor=self.resume_timeout > 0)
        # Every open is sent once all handshakes are done and before any answer is
        # awaited: a server building one environment answers no handshake
        # meanwhile, so interleaving them would make the servers take turns.
        for i, (ws, core) in enumerate(zip(self._ws, self._cores, strict=True)):
            ws.send(encode(core.open_frame()))
            self._register(i, ws)
        # Answers are read from whichever socket is ready, so that every
        # connection answers the server's pings while others are still opening.
        waiting = set(range(len(self._ws)))
        while waiting:
            for key, _ in self._selector.select(_left(deadline)):
                i = key.data
                ws, core = self._ws[i], self._cores[i]
                try:
                    frame = ws.recv_nowait(core.decode)
                except SessionClosed as exc:
                    raise SessionClosed(exc.close_code, f"env {i}: {exc.reason}") from None
                if frame is NOT_READY or i not in waiting:
                    continue
                waiting.discard(i)
                try:
                    core.opened(frame)
                except RemoteEnvError as exc:
                    raise RemoteEnvError(
                        exc.code, f"env {i} ({self.urls[i]}): {exc.message}", fatal=exc.fatal
                    ) from None
        first = self._cores[0].spec
        assert first is not None
        for i, core in enumerate(self._cores[1:], 1):
            spec = core.spec
            assert spec is not None
            if spec.observation != first.observation or spec.action != first.action:
                raise EnvConfigError(
                    f"env {i} has observation {spec.observation} and action {spec.action}, "
                    f"env 0 has {first.observation} and {first.action}; the sessions of one "
                    "vector client must share their spaces"
                )

    # ------------------------------------------------------------------ properties

    @property
    def spec(self) -> EnvSpec:
        """The spaces of one session (all sessions share them)."""
        spec = self._cores[0].spec
        assert spec is not None
        return spec

    @property
    def specs(self) -> list[EnvSpec]:
        """Each session's spec (their ``extra`` may differ, e.g. per-env configs)."""
        return [c.spec for c in self._cores]  # type: ignore[misc]

    @property
    def session_ids(self) -> list[str]:
        """The server-side id of each session, by env id."""
        return [c.session_id or "" for c in self._cores]

    @property
    def pending(self) -> list[int]:
        """Env ids with a request in flight (sent and not yet returned by :meth:`recv`)."""
        return [i for i, kind in enumerate(self._pending) if kind != _IDLE]

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
        seeds = _seeds(seed, ids, self.num_envs)
        busy = [i for i in ids if self._pending[i] != _IDLE]
        if busy:
            raise InvalidState(
                f"envs {busy} have a request in flight; recv() their results before resetting"
            )
        guard = self._guard
        guard.lock.acquire()
        guard.calls += 1
        try:
            for i, s in zip(ids, seeds, strict=True):
                self._send_reset(i, s, dict(options or {}), _RESET)
            arrivals = self._gather(ids, timeout)
        finally:
            guard.lock.release()
        return self._batch(arrivals, by_id=True)[0::4]

    def step(
        self, actions: Sequence[Any] | np.ndarray[Any, Any], *, timeout: float | None = DEFAULT
    ) -> StepBatch:
        """Step every env with its action and wait for all of them.

        Returns:
            ``(obs, rewards, terminations, truncations, infos)``, one row per env.
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
        return self._batch(arrivals, by_id=True)

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
            ValueError: ``actions`` and ``env_ids`` differ in length.
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
        acts = actions.tolist() if isinstance(actions, np.ndarray) else list(actions)
        if len(acts) != len(ids):
            raise ValueError(f"{len(acts)} actions for {len(ids)} envs; give one action per env")
        pending = self._pending
        for i in ids:
            if pending[i] != _IDLE:
                raise InvalidState(
                    f"env {i} already has a request in flight; recv() its result before "
                    "sending it another action"
                )
        needs_reset = self._needs_reset
        for i, action in zip(ids, acts, strict=True):
            if needs_reset[i]:
                self._send_reset(i, None, {}, _AUTORESET)
                continue
            rid = self._cores[i].next_id()
            self._transmit(i, rid, encode_step(rid, action), _STEP)

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
        in_flight = sum(kind != _IDLE for kind in self._pending)
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
        return self._batch(self._deliver(arrivals), by_id=False)

    # ------------------------------------------------------------------ I/O

    def _send_reset(self, i: int, seed: int | None, options: dict[str, Any], kind: int) -> None:
        rid = self._cores[i].next_id()
        self._transmit(i, rid, encode(Reset(id=rid, seed=seed, options=options)), kind)

    def _transmit(self, i: int, rid: int, data: bytes, kind: int) -> None:
        """Send env ``i`` its next request, resuming its session if the connection dropped."""
        self._requests[i] = data
        self._rids[i] = rid
        self._pending[i] = kind
        self._awaiting[i] = True
        try:
            self._ws[i].send(data)
        except SessionClosed as exc:
            error = self._resume(i, exc)  # re-sends the request
            if error is not None:
                self._pending[i] = _IDLE
                self._awaiting[i] = False
                raise _named(i, error) from None

    def _register(self, i: int, ws: BlockingWebSocket) -> None:
        fd = ws.fileno()
        self._selector.register(fd, selectors.EVENT_READ, i)
        self._fds[i] = fd

    def _unregister(self, i: int) -> None:
        fd, self._fds[i] = self._fds[i], -1
        if fd >= 0:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(fd)

    def _resume(self, i: int, cause: SessionClosed) -> OpenEnvError | None:
        """Take env ``i``'s session back on a new connection; None, or the error to report.

        The request in flight, if any, is re-sent byte for byte: the server
        answers it from its reply cache if it had served it already.
        """
        core = self._cores[i]
        self._unregister(i)
        read_last_words(self._ws[i], core)  # closed between calls: what the server said
        if core.closed_error is not None:
            return core.closed_error
        if not (self.resume_timeout > 0 and can_resume(core, cause)):
            return cause
        logger.info(
            "env %d: connection to %s dropped (%s); resuming", i, self.urls[i], cause.reason
        )
        attempt = Resumption(core, self.urls[i], cause, self.resume_timeout)
        try:
            while True:
                try:
                    ws = self._reopen(i, attempt)
                    break
                except OpenEnvError as exc:
                    time.sleep(attempt.retry_after(exc))  # raises when it is hopeless
        except OpenEnvError as final:
            return final
        self._ws[i] = ws
        self._register(i, ws)
        keep_alive(ws)
        return None

    def _reopen(self, i: int, attempt: Resumption) -> BlockingWebSocket:
        """One try: connect, ask for env ``i``'s session back, re-send its request in flight."""
        core = self._cores[i]
        ws = BlockingWebSocket(
            self.urls[i],
            open_timeout=attempt.connect_timeout(self.open_timeout),
            headers=core.headers(),
            max_size=core.max_frame_size,
            guard=self._guard,
        )
        try:
            core.handshake_answered(ws.response_headers, keep_descriptor=True)
            frame = attempt.open_frame()
            ws.send(encode(frame))
            attempt.opened(reply_to(ws, core, frame.id, attempt.connect_timeout(None)))
            if self._awaiting[i]:
                ws.send(self._requests[i])
        except BaseException:
            ws.close(timeout=0.1)
            raise
        return ws

    def _gather(self, ids: list[int], timeout: float | None) -> list[_Arrival]:
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
            first = _named(*failed[0])
            for j, other in failed[1:]:
                first.add_note(f"also: {_named(j, other)}")
            raise first
        return mine

    def _deliver(self, arrivals: list[_Arrival]) -> list[_Arrival]:
        pending = self._pending
        for a in arrivals:
            pending[a[0]] = _IDLE
        return arrivals

    def _poll(
        self, done: Callable[[], bool], deadline: float | None, *, raise_errors: bool
    ) -> None:
        """Read replies into the inbox until ``done()``; raise failures as they come if asked."""
        check = self._check_errors if raise_errors else _nothing
        check()
        awaiting = self._awaiting
        # Bytes already buffered need no system call; drain them first.
        for i, ws in enumerate(self._ws):
            if awaiting[i] and ws.buffered:
                self._read(i)
        select = self._selector.select
        while not done():
            check()
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise RequestTimeout(
                    "the env results did not arrive in time; they may still arrive and "
                    "will be returned by a later recv()"
                )
            ready = self._spin() if self.busy_poll else None
            if not ready:
                ready = select(left)
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

    def _read(self, i: int) -> None:
        """Take every whole reply env ``i``'s socket holds now."""
        ws = self._ws[i]
        core = self._cores[i]
        while True:
            try:
                frame = ws.recv_nowait(core.decode)
            except SessionClosed as exc:
                error = self._resume(i, exc)
                if error is not None:
                    self._fail(i, error)
                return
            except Exception as exc:  # noqa: BLE001 - reported by the next recv()/step()
                self._fail(i, exc)
                return
            if frame is NOT_READY:
                return
            if not self._awaiting[i] or not core.is_reply(self._rids[i], frame):
                continue  # a late reply to a request that timed out
            self._awaiting[i] = False
            if isinstance(frame, Error):
                self._pending[i] = _IDLE
                try:
                    core.check(frame)
                except RemoteEnvError as exc:
                    self._errors.append(
                        (i, RemoteEnvError(exc.code, f"env {i}: {exc.message}", fatal=exc.fatal))
                    )
                continue
            if type(frame) is not Result:
                self._pending[i] = _IDLE
                self._errors.append(
                    (i, InvalidState(f"env {i}: expected a 'result' reply, got '{frame.OP}'"))
                )
                continue
            self._arrive(i, frame)

    def _arrive(self, i: int, frame: Result) -> None:
        kind = self._pending[i]
        done = frame.done
        if kind == _STEP and done and self.autoreset_mode == "same_step":
            # Keep the final step; its row is completed by the reset's observation.
            self._final[i] = frame
            self._send_reset(i, None, {}, _FINAL_RESET)
            return
        if kind == _FINAL_RESET:
            step = self._final.pop(i)
            merged = Result(
                frame.id, frame.obs, step.reward, step.terminated, step.truncated, True, frame.info
            )
            self._inbox.append((i, merged, (step.obs, step.info)))
            return
        self._needs_reset[i] = done and self.autoreset_mode == "next_step"
        if kind == _AUTORESET:
            frame = Result(frame.id, frame.obs, 0.0, False, False, False, frame.info)
        self._inbox.append((i, frame, None))

    def _fail(self, i: int, exc: BaseException) -> None:
        self._pending[i] = _IDLE
        self._awaiting[i] = False
        self._errors.append((i, exc))
        if self._ws[i].closed:
            self._unregister(i)

    def _check_errors(self) -> None:
        if self._errors:
            i, exc = self._errors.pop(0)
            raise _named(i, exc) from None

    # ------------------------------------------------------------------ batching

    def _batch(self, arrivals: list[_Arrival], *, by_id: bool) -> StepBatch:
        k = len(arrivals)
        ids = np.fromiter((a[0] for a in arrivals), np.int64, k)
        if by_id:
            obs, rewards, terms, truncs = (
                self._obs,
                self._rewards,
                self._terminations,
                self._truncations,
            )
        else:
            if self._batch_obs is None:
                self._batch_obs = np.zeros_like(self._obs)
            obs = self._batch_obs[:k]
            rewards = np.empty(k, np.float64)
            terms = np.empty(k, np.bool_)
            truncs = np.empty(k, np.bool_)
        infos: list[dict[str, Any] | None] = [None] * (self.num_envs if by_id else k)
        finals: list[tuple[int, Any, Any]] = []
        for row, (i, frame, final) in enumerate(arrivals):
            r = i if by_id else row
            if frame.obs is not None:
                obs[r] = frame.obs
            rewards[r] = frame.reward
            terms[r] = frame.terminated
            truncs[r] = frame.truncated
            infos[r] = frame.info
            if final is not None:
                finals.append((r, *final))
        info = _stack_infos(infos)
        if finals:
            n = len(infos)
            final_obs = np.empty(n, object)
            final_info = np.empty(n, object)
            mask = np.zeros(n, np.bool_)
            for r, o, inf in finals:
                final_obs[r], final_info[r], mask[r] = o, inf, True
            info.update(
                final_obs=final_obs, _final_obs=mask, final_info=final_info, _final_info=mask.copy()
            )
        if not by_id:
            info["env_id"] = ids
        if self.copy:
            return obs.copy(), rewards.copy(), terms.copy(), truncs.copy(), info
        return obs, rewards, terms, truncs, info

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
            for ws, core in zip(self._ws, self._cores, strict=False):
                if not ws.closed:
                    with contextlib.suppress(Exception):  # closing is best effort
                        ws.send(encode(Close(id=core.next_id())))
            for ws in self._ws:
                ws.close(timeout=2.0)
        self._selector.close()
        self._release()

    def _abort(self) -> None:
        self.closed = True
        for ws in self._ws:
            ws.close(timeout=0.5)
        self._selector.close()
        self._release()

    def _release(self) -> None:
        for core in self._cores:
            core.release()

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


def _nothing() -> None:
    pass


def _named(i: int, exc: BaseException) -> BaseException:
    """`exc`, a ``SessionClosed`` with the env it concerns named in its reason."""
    if isinstance(exc, SessionClosed) and not exc.reason.startswith(f"env {i}"):
        return SessionClosed(exc.close_code, f"env {i}: {exc.reason}")
    return exc


def _left(deadline: float | None) -> float | None:
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise RequestTimeout("the sessions did not open in time (open_timeout)")
    return left


def _seeds(seed: int | Sequence[int | None] | None, ids: list[int], n: int) -> list[int | None]:
    if seed is None:
        return [None] * len(ids)
    if isinstance(seed, int | np.integer):
        return [int(seed) + i for i in ids]
    seeds = list(seed)
    if len(seeds) == n and len(ids) != n:
        seeds = [seeds[i] for i in ids]
    if len(seeds) != len(ids):
        raise ValueError(f"{len(seeds)} seeds for {len(ids)} envs; give one seed per env")
    return [None if s is None else int(s) for s in seeds]


_DTYPES: dict[type, Any] = {int: np.int64, float: np.float64, bool: np.bool_}


def _stack_infos(infos: list[dict[str, Any] | None]) -> dict[str, Any]:
    """Per-env info maps in Gymnasium's vector layout: one array per key plus its mask."""
    n = len(infos)
    out: dict[str, Any] = {}
    for r, info in enumerate(infos):
        if not info:
            continue
        for key, value in info.items():
            column = out.get(key)
            if column is None:
                kind = type(value)
                dtype: Any = _DTYPES.get(kind, object)
                column = out[key] = np.zeros(n, dtype)
                out["_" + key] = np.zeros(n, np.bool_)
            try:
                column[r] = value
            except (TypeError, ValueError, OverflowError):
                column = out[key] = column.astype(object)
                column[r] = value
            out["_" + key][r] = True
    return out
