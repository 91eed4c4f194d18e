"""A vector session: ``num_envs`` environments behind one WebSocket (SPEC section 21).

The server steps the envs of one session together (for Atari, on ALE's
threaded vector engine) and answers each request with one ``batch``: the
observations of B envs as one array, their rewards, flags, env ids and infos
as arrays of B rows. Observations come through the shared region on this host
(copied once, straight into the client's buffer), compressed across a network,
or inline.

Two ways to drive it, as ``ale_py.vector_env.AtariVectorEnv`` and EnvPool:

- synchronous (``batch_size`` = ``num_envs``, the default): :meth:`reset` and
  :meth:`step` return one row per env, in env order;
- asynchronous (``batch_size`` < ``num_envs``): :meth:`reset` returns the first
  ``batch_size`` envs that are ready; :meth:`send` gives actions to the envs of
  the batch just returned and :meth:`recv` returns the next ``batch_size``
  ready envs, ``infos["env_id"]`` saying which.

Autoreset follows Gymnasium (``"next_step"``: the step after an episode's last
one resets that env; ``"same_step"``: the ending step resets it at once and
puts the last observation in ``infos["final_obs"]``, its info in
``infos["final_info"]``, with ``_final_obs``/``_final_info`` masks, as
Gymnasium's ``SyncVectorEnv`` gives them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Unpack

import numpy as np

from .._arrays import check_bools
from ..autoreset import SESSION_AUTORESET_MODES as VECTOR_AUTORESET_MODES
from ..autoreset import parse_autoreset_mode
from ..environment import ArraySpec
from ..errors import EnvConfigError, InvalidState, ProtocolError
from ..protocol import Batch, ServerFrame, StateReply, encode
from ._batch import StepBatch, action_array, env_id_list, final_infos
from ._core import DEFAULT, ClientCore
from ._ops import Linked
from .options import BlockingOptions, ClientOptions
from .sync import SocketSession

__all__ = ["VECTOR_AUTORESET_MODES", "VectorSessionClient"]

Array = np.ndarray[Any, Any]


class VectorSessionClient(Linked):
    """``num_envs`` environments in one session on one WebSocket, stepped as a batch.

    Example::

        with VectorSessionClient("ws://127.0.0.1:8000", 8, config={"game": "pong"}) as envs:
            obs, infos = envs.reset(seed=0)        # obs: (8, 210, 160, 3) uint8
            obs, rewards, terminations, truncations, infos = envs.step(actions)

        with VectorSessionClient(url, 16, batch_size=8, config=config) as envs:
            obs, infos = envs.reset(seed=0)        # the first 8 envs ready
            for _ in range(1000):
                envs.send(policy(obs))             # to the envs of infos["env_id"]
                obs, rewards, terminations, truncations, infos = envs.recv()

    :attr:`spec` holds the spaces of ONE env; its ``extra`` has ``num_envs``,
    ``batch_size`` and ``autoreset_mode`` besides the environment's details.

    Args:
        url: the server (as :class:`~openenv_ws.client.EnvClient`'s).
        num_envs: how many envs the session holds.
        config: the configuration of every env (``autoreset_mode`` is added).
        batch_size: envs per batch; None or ``num_envs``: synchronous; fewer:
            asynchronous (:meth:`send`/:meth:`recv` only).
        autoreset_mode: ``"next_step"`` (default) or ``"same_step"`` (or a
            ``gymnasium.vector.AutoresetMode``).
        copy: return new observation arrays (True, default) or the client's
            preallocated buffer, overwritten by the next call (False).
        **options: as :class:`~openenv_ws.client.EnvClient`'s (``open_timeout``
            is 60 s and ``delta`` off by default: consecutive batches of
            different envs differ; ``indexed_frames`` is not for vector sessions,
            whose frames come in full colour).

    Raises:
        ValueError: a bad `num_envs`, `batch_size` or `autoreset_mode`, or TLS
            and token options as :class:`~openenv_ws.client.EnvClient`.
        ServerUnavailable, AuthError, TLSError: as :class:`~openenv_ws.client.EnvClient`.
        RemoteEnvError: the server refused the session (``bad_config`` names the key).
        EnvConfigError: the server opened something other than the vector
            session asked for (a server without vector sessions).
    """

    def __init__(
        self,
        url: str,
        num_envs: int,
        *,
        config: Mapping[str, Any] | None = None,
        batch_size: int | None = None,
        autoreset_mode: Any = "next_step",
        copy: bool = True,
        **options: Unpack[BlockingOptions],
    ) -> None:
        if type(num_envs) is not int or num_envs < 1:
            raise ValueError(f"num_envs must be an integer of at least 1, got {num_envs!r}")
        size = num_envs if batch_size is None else batch_size
        if type(size) is not int or not 1 <= size <= num_envs:
            raise ValueError(f"batch_size must be an integer in 1..{num_envs}, got {batch_size!r}")
        mode = parse_autoreset_mode(autoreset_mode, VECTOR_AUTORESET_MODES)
        self.num_envs = num_envs
        self.batch_size = size
        self.autoreset_mode = mode
        self.copy = copy
        opts = ClientOptions.of(type(self).__name__, options, open_timeout=60.0, delta=False)
        if opts.indexed_frames:
            raise ValueError(
                "indexed_frames is not for vector sessions (their frames come in full "
                "colour); leave it out"
            )
        core = opts.core({**(config or {}), "autoreset_mode": mode}, indexed_frames=False)
        core.num_envs = num_envs
        core.batch_size = batch_size
        # The request sent by send() whose batch recv() has not returned: (bytes, id).
        self._pending: tuple[bytes, int] | None = None
        # The env ids of the last batch returned: send()'s actions go to them.
        self._last_ids: Array | None = None
        self.timeout = opts.timeout
        self._core = core
        self._link: SocketSession = SocketSession(url, core, opts)
        try:
            self._check_opened()
        except BaseException:
            self.close()
            raise
        obs = self.spec.observation
        assert isinstance(obs, ArraySpec)  # _check_opened saw to it
        self._obs: Array = np.zeros((size, *obs.shape), obs.dtype)
        self._rewards: Array = np.zeros(size, np.float64)
        self._terminations: Array = np.zeros(size, np.bool_)
        self._truncations: Array = np.zeros(size, np.bool_)
        self._in_order: Array = np.arange(size, dtype=np.int32)
        self._in_order_bytes = self._in_order.tobytes()

    def _check_opened(self) -> None:
        spec = self.spec
        extra = spec.extra
        asked = (self.num_envs, self.batch_size, self.autoreset_mode)
        got = (extra.get("num_envs"), extra.get("batch_size"), extra.get("autoreset_mode"))
        if got != asked:
            raise EnvConfigError(
                f"{self.url} opened a session with num_envs, batch_size, autoreset_mode = "
                f"{got}, not the {asked} asked for; the server may not host vector sessions "
                "(SPEC section 21): use VectorEnvClient, one session per env, instead"
            )
        if not isinstance(spec.observation, ArraySpec):
            raise EnvConfigError(f"the session's observations are not arrays: {spec.observation}")

    # ------------------------------------------------------------------ properties

    @property
    def asynchronous(self) -> bool:
        """True when ``batch_size`` < ``num_envs`` (:meth:`send`/:meth:`recv` only)."""
        return self.batch_size < self.num_envs

    @property
    def pending(self) -> bool:
        """True while a :meth:`send` waits for its :meth:`recv`."""
        return self._pending is not None

    # ------------------------------------------------------------------ API

    def reset(
        self,
        *,
        seed: int | None = None,
        env_ids: Sequence[int] | Array | None = None,
        options: Mapping[str, Any] | None = None,
        timeout: float | None = DEFAULT,
    ) -> tuple[Array, dict[str, Any]]:
        """Reset every env (or `env_ids`) and return the first batch.

        Args:
            seed: env ``i`` gets ``seed + i`` (as ``AtariVectorEnv``); None: unseeded.
            env_ids: reset only these envs (synchronous sessions): every row is
                returned, the others with their current observation.
            options: further reset options sent to the server.

        Returns:
            ``(obs, infos)``: ``num_envs`` rows in env order (synchronous), or
            the first ``batch_size`` envs ready (asynchronous).

        Raises:
            InvalidState: a :meth:`send` awaits its :meth:`recv`; `env_ids` in
                an asynchronous session; the client is closed.
            ValueError: an env id out of range or repeated; a seed that is not an int.
        """
        self._idle("reset")
        if seed is not None:
            if not isinstance(seed, int | np.integer) or isinstance(seed, bool):
                raise ValueError(f"seed must be an int or None, got {seed!r}")
            seed = int(seed)
        opts = dict(options or {})
        if env_ids is not None:
            if self.asynchronous:
                raise InvalidState(
                    "reset(env_ids=...) is for synchronous sessions (batch_size == num_envs); "
                    "an asynchronous session resets all its envs"
                )
            opts["env_ids"] = env_id_list(env_ids, self.num_envs)
        reply = self._link.roundtrip(self._core.reset_frame(seed, None, opts), self._wait(timeout))
        obs, _, _, _, infos = self._take(reply, by_env=not self.asynchronous)
        return obs, infos

    def step(self, actions: Sequence[int] | Array, *, timeout: float | None = DEFAULT) -> StepBatch:
        """Step every env with its action and return one row per env, in env order.

        Args:
            actions: one action per env: integers of shape ``(num_envs,)`` for a
                discrete space, else a row per env (a Box: ``(num_envs, *shape)``).

        Returns:
            ``(obs, rewards, terminations, truncations, infos)``.

        Raises:
            InvalidState: an asynchronous session (use :meth:`send` and
                :meth:`recv`), a pending :meth:`send`, or a closed client.
            ValueError: `actions` is not ``num_envs`` actions of the space (nothing is sent).
            RemoteEnvError: the server refused the step (e.g. ``invalid_action``).
        """
        if self.asynchronous:
            raise InvalidState(
                f"step() is for synchronous sessions; this one has batch_size "
                f"{self.batch_size} < num_envs {self.num_envs}: use send() and recv()"
            )
        self._idle("step")
        arr = action_array(actions, self.num_envs, self.spec.action)
        reply = self._link.roundtrip(self._core.step_frame(arr, True), self._wait(timeout))
        return self._take(reply, by_env=True)

    def send(
        self, actions: Sequence[int] | Array, env_ids: Sequence[int] | Array | None = None
    ) -> None:
        """Send actions to the envs of the last batch and return at once (:meth:`recv`
        returns the next batch).

        Args:
            actions: one action per env of the last batch, ``batch_size`` rows (as
                :meth:`step`'s).
            env_ids: the env of each action, exactly the last batch's envs in any
                order; None: the last batch's row order (``infos["env_id"]``).

        Raises:
            InvalidState: no batch yet (:meth:`reset` first), a send already
                pending, or a closed client.
            ValueError: `actions` or `env_ids` of the wrong shape or type, or
                `env_ids` other than the last batch's envs (nothing is sent).
        """
        self._idle("send")
        last = self._last_ids
        if last is None:
            raise InvalidState("no batch to act on yet; call reset() first")
        arr = action_array(actions, self.batch_size, self.spec.action)
        ids: Array | None = None
        if env_ids is not None:
            ids = np.asarray(env_id_list(env_ids, self.num_envs), np.int32)
            if len(ids) != len(last) or not np.array_equal(np.sort(ids), np.sort(last)):
                raise ValueError(
                    f"env_ids must be the envs of the last batch {sorted(last.tolist())} "
                    f"in any order, got {ids.tolist()}"
                )
        frame = self._core.send_frame(arr, ids)
        data = encode(frame)
        self._link.post(data)
        self._pending = (data, frame.id)

    def recv(self, *, timeout: float | None = DEFAULT) -> StepBatch:
        """The batch answering the last :meth:`send`: ``batch_size`` rows, in the
        order the server gives them, ``infos["env_id"]`` naming their envs.

        Raises:
            InvalidState: no :meth:`send` is pending.
            RequestTimeout: the batch did not come in time (a later recv()
                takes it).
            RemoteEnvError: the server refused the send (the session goes on;
                send again to the same envs).
        """
        pending = self._pending
        if pending is None:
            raise InvalidState("recv() without a pending send(); send() actions first")
        data, rid = pending
        try:
            reply = self._link.request(data, rid, self._wait(timeout), sent=True)
        except Exception as exc:
            if not isinstance(exc, TimeoutError):  # a late batch is taken by the next recv()
                self._pending = None
            raise
        self._pending = None
        return self._take(reply, by_env=False)

    def state(self, *, timeout: float | None = DEFAULT) -> dict[str, Any]:
        """The session's state (``num_envs``, ``batch_size``, step counts, config)."""
        self._idle("state")
        reply = self._link.roundtrip(self._core.state_frame(), self._wait(timeout))
        state: dict[str, Any] = ClientCore.expect(reply, StateReply).state
        return state

    # ------------------------------------------------------------------ batches

    def _idle(self, op: str) -> None:
        if self._pending is not None:
            raise InvalidState(
                f"{op}() while a send() awaits its batch; recv() it first", code="invalid_state"
            )

    def _take(self, frame: ServerFrame, *, by_env: bool) -> StepBatch:
        """The arrays of a ``batch`` reply: rows put in env order if `by_env`."""
        if type(frame) is not Batch:
            raise ProtocolError(f"expected a 'batch' reply in a vector session, got '{frame.OP}'")
        ids, reward, terminated, truncated = (
            frame.env_id,
            frame.reward,
            frame.terminated,
            frame.truncated,
        )
        # (the decoder checked them: 1-d arrays of one row per env)
        assert ids is not None and reward is not None
        assert terminated is not None and truncated is not None
        columns = (reward, terminated, truncated)
        rows = self.num_envs if by_env else self.batch_size
        if len(ids) != rows:
            raise ProtocolError(f"the server sent a batch of {len(ids)} rows, not {rows}")
        order: Array | None = None
        if by_env and ids.tobytes() != self._in_order_bytes:  # (the int32 wire column)
            if not np.array_equal(np.sort(ids), self._in_order):
                raise ProtocolError(f"the batch's env ids {ids.tolist()} are not each env once")
            order = ids
        obs = self._observations(frame.obs, order)
        copy = self.copy
        out = (self._rewards, self._terminations, self._truncations)
        if copy:
            out = tuple(np.empty(rows, a.dtype) for a in out)  # type: ignore[assignment]
        for target, column in zip(out, columns, strict=True):
            if order is None:
                np.copyto(target, column)
            else:
                target[order] = column
        infos = _rows(frame.info, order, copy)
        infos["env_id"] = self._in_order.copy() if order is not None else np.array(ids)
        if self.autoreset_mode == "same_step":
            same_step_finals(infos, out[1] | out[2])
        self._last_ids = infos["env_id"]
        return obs, out[0], out[1], out[2], infos

    def _observations(self, obs: Array | None, order: Array | None) -> Array:
        """`obs` (the batch's, in place in the shared region or decoded) copied into
        the buffer, or into a new array when the client hands out copies."""
        buf = self._obs
        if obs is None:  # not asked for: the rows as they were
            return buf.copy() if self.copy else buf
        if obs.shape != buf.shape or obs.dtype != buf.dtype:
            raise ProtocolError(
                f"the batch's observations have shape {obs.shape} and dtype {obs.dtype}, "
                f"not {buf.shape} and {buf.dtype}"
            )
        target = np.empty_like(buf) if self.copy else buf
        if order is None:
            np.copyto(target, obs)
        else:
            target[order] = obs
        check_bools(target)  # (the copy: the region's bytes may change under a view)
        return target

    def __repr__(self) -> str:
        return (
            f"VectorSessionClient(url={getattr(getattr(self, '_link', None), 'url', '?')!r}, "
            f"num_envs={getattr(self, 'num_envs', 0)}, batch_size={getattr(self, 'batch_size', 0)}, "
            f"autoreset_mode={getattr(self, 'autoreset_mode', None)!r}, "
            f"closed={getattr(self, '_link', None) is None or self.closed})"
        )


def _rows(info: Mapping[str, Any], order: Array | None, copy: bool) -> dict[str, Any]:
    """The batch's info columns, rows put in env order by `order` (row r is env
    ``order[r]``) and made writable copies if `copy`; nested maps likewise."""
    out: dict[str, Any] = {}
    for key, value in info.items():
        if isinstance(value, Mapping):
            out[key] = _rows(value, order, copy)
        elif isinstance(value, np.ndarray) and value.ndim:
            if order is not None:
                column = np.empty_like(value)
                column[order] = value
                value = column
            elif copy:
                value = np.array(value)
            out[key] = value
        else:
            out[key] = value
    return out


def same_step_finals(infos: dict[str, Any], ended: Array) -> None:
    """A same-step batch's infos in the layout of Gymnasium's ``SyncVectorEnv``.

    The wire's ``final_obs`` (SPEC section 21) holds a row for every env of a
    batch in which one ended, meaningful where it did (`ended`); it becomes an
    object array holding those rows (None elsewhere) with its ``_final_obs``
    mask. ``final_info`` is a dict of arrays with ``_key`` masks and its
    ``_final_info`` mask: what the server sent of the ending steps' infos
    (nothing for Atari, whose engine reports the new episode's info in the
    batch's rows).
    """
    final_obs = infos.pop("final_obs", None)
    if final_obs is None and not ended.any():
        return
    final_info = infos.pop("final_info", None)
    rows = [
        (r, None if final_obs is None else final_obs[r], None)
        for r in np.flatnonzero(ended).tolist()
    ]
    infos.update(final_infos(rows, len(ended)))
    if isinstance(final_info, dict):
        infos["final_info"] = final_info
