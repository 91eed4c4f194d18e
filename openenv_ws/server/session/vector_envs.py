"""Vector sessions on the server (SPEC section 21): one ``open`` with ``num_envs``, batches back.

A :class:`VectorSession` takes the place of a session's environment (so the
server's plumbing, resume and close, treats it as it treats any other; it is
served on its session's worker thread, never on the event loop, and so is its
open) and answers the session's requests other than ``open`` and ``close``
with :meth:`VectorSession.dispatch`: ``reset``, ``step`` and
``send`` with ``batch`` frames, ``state`` with the session's counters.
Single sessions never come here.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from ..._shm import MIN_SHARED_BYTES, ServerRegion
from ...brief import brief, brief_keys
from ...environment import (
    ArraySpec,
    BatchResult,
    DiscreteSpec,
    EnvFactory,
    EnvSpec,
    Pace,
    VectorEnvironment,
    VectorFactory,
)
from ...errors import EnvConfigError, InvalidAction, InvalidState, ProtocolError
from ...protocol import (
    Batch,
    ClientFrame,
    GetState,
    Open,
    Reset,
    Restore,
    Send,
    ServerFrame,
    Snapshot,
    StateReply,
    Step,
)
from ...wire.compress import MIN_COMPRESSED_BYTES, ObsPacker
from .serial import SerialVectorEnvironment

__all__ = ["BatchOutlet", "VectorSession", "check_num_envs", "open_vector"]


class BatchOutlet(Protocol):
    """What a vector session writes its batches through: the session that holds it
    (its shared region and compression, and the step count it keeps)."""

    steps: int
    shared: ServerRegion | None
    packer: ObsPacker | None


def check_num_envs(num_envs: int, max_envs: int) -> int:
    """`num_envs` of an ``open``, if at most `max_envs` (the server's limit).

    Raises:
        EnvConfigError: more envs than `max_envs`.
    """
    if num_envs > max_envs:
        raise EnvConfigError(
            f"num_envs {num_envs} is above this server's limit of {max_envs} envs per "
            "vector session (openenv-ws serve --max-envs); open fewer or use more sessions"
        )
    return num_envs


def open_vector(factory: EnvFactory, frame: Open, *, pace: Pace | None = None) -> VectorSession:
    """Build the environments of a vector session from its ``open`` (off the event loop).

    `factory` is the server's environment factory; its ``vector`` attribute
    (:attr:`~openenv_ws.registry.EnvPlugin.vector`), when set, builds them,
    else :class:`~.serial.SerialVectorEnvironment` steps single instances in turn.
    With `pace`, the build takes its turns: a step at a time when the vector factory
    takes a ``pace`` keyword (the serial one does, an env a step), else in one step.

    Raises:
        EnvConfigError: a config refused.
    """
    num_envs = frame.num_envs
    assert num_envs is not None
    batch_size = num_envs if frame.batch_size is None else frame.batch_size
    vector: VectorFactory | None = getattr(factory, "vector", None)
    config = dict(frame.config)
    if vector is None:
        venv: VectorEnvironment = SerialVectorEnvironment(
            factory, config, num_envs, batch_size, pace=pace
        )
    elif pace is None:
        venv = vector(config, num_envs, batch_size)
    elif "pace" in inspect.signature(vector).parameters:
        venv = vector(config, num_envs, batch_size, pace=pace)  # type: ignore[call-arg]
    else:
        with pace(num_envs):
            venv = vector(config, num_envs, batch_size)
    return VectorSession(venv)


def _unsupported(op: str) -> InvalidState:
    return InvalidState(f"'{op}' is not supported in a vector session", code="unsupported")


class VectorSession:
    """A vector environment hosted by a session (its spec, state and close, as a single
    environment's), and the session's requests.

    Args:
        venv: the session's environments.
    """

    #: Served on the session's worker thread, never on the event loop: a reset or a
    #: step of many envs is not small, whatever a single env's is.
    inline = False

    def __init__(self, venv: VectorEnvironment) -> None:
        self.venv = venv
        self.num_envs = venv.num_envs
        self.batch_size = venv.batch_size
        spec = venv.spec
        extra = {
            **spec.extra,
            "num_envs": venv.num_envs,
            "batch_size": venv.batch_size,
            "autoreset_mode": venv.autoreset_mode,
        }
        self._spec = EnvSpec(spec.action, spec.observation, extra)
        action = spec.action
        self._actions = action.n if isinstance(action, DiscreteSpec) else None
        #: Env ids of the last batch, in its row order (None: no reset yet).
        self.pending: np.ndarray[Any, Any] | None = None
        #: Batches served by step/send, and resets.
        self.batches = 0
        self.resets = 0

    # ------------------------------------------------------------------ as a session's host

    @property
    def spec(self) -> EnvSpec:
        return self._spec

    def state(self) -> dict[str, Any]:
        return self._state()

    def close(self) -> None:
        self.venv.close()

    # ------------------------------------------------------------------ requests

    def dispatch(self, session: BatchOutlet, frame: ClientFrame) -> ServerFrame:
        """The reply to `frame` (any op but ``open`` and ``close``) of `session`.

        Raises:
            OpenEnvError: the request is refused (its code says why).
        """
        match frame:
            case Send(id=rid, action=action, env_ids=env_ids, obs=want_obs):
                pending = self._running("send")
                actions = self._action_rows(action, len(pending))
                order = pending if env_ids is None else self._order(env_ids, pending)
                self.venv.send(actions, order)
                return self._batch(session, rid, self.venv.recv(), want_obs)
            case Step(id=rid, action=action, obs=want_obs):
                self._running("step")
                if self.batch_size != self.num_envs:
                    raise InvalidState(
                        "'step' is for synchronous vector sessions; this one is asynchronous "
                        f"(batch_size {self.batch_size} of {self.num_envs} envs): use 'send'",
                        code="unsupported",
                    )
                actions = self._action_rows(action, self.num_envs)
                return self._batch(session, rid, self.venv.step(actions), want_obs)
            case Reset(id=rid, seed=seed, options=options):
                if self.pending is not None and self.batch_size != self.num_envs:
                    # Steps are under way in the engine's threads: a reset now would race them.
                    raise InvalidState(
                        "an asynchronous vector session is reset once; its envs reset "
                        "themselves when their episodes end (autoreset): go on with 'send', "
                        "or open a new session to start over",
                        code="unsupported",
                    )
                env_ids = self._reset_ids(options)
                result = self.venv.reset(seed=seed, env_ids=env_ids)
                self.resets += 1
                if session.packer is not None:
                    session.packer.key()
                return self._batch(session, rid, result, True, counted=False)
            case GetState(id=rid):
                return StateReply(id=rid, state=self._state())
            case Snapshot() | Restore():
                raise InvalidState(
                    f"'{frame.OP}' is not supported in a vector session; "
                    "snapshots are taken of single sessions",
                    code="unsupported",
                )
        raise ProtocolError(f"op '{frame.OP}' has no handler", code="unknown_op")

    def _running(self, op: str) -> np.ndarray[Any, Any]:
        pending = self.pending
        if pending is None:
            raise InvalidState(
                f"'{op}' is not allowed before the vector session's first reset: "
                "call reset() first",
                code="not_reset",
            )
        return pending

    def _batch(
        self,
        session: BatchOutlet,
        rid: int,
        result: BatchResult,
        want_obs: bool,
        *,
        counted: bool = True,
    ) -> Batch:
        """The ``batch`` of `result`: its observation through the session's shared
        region or compressed as a single session's would be."""
        self.pending = result.env_id
        if counted:
            self.batches += 1
            session.steps += 1
        obs: Any = result.obs if want_obs else None
        shared = session.shared
        if shared is not None and type(obs) is np.ndarray and obs.nbytes >= MIN_SHARED_BYTES:
            obs = shared.put(obs) or obs
        packer = session.packer
        if packer is not None and type(obs) is np.ndarray and obs.nbytes >= MIN_COMPRESSED_BYTES:
            obs = packer.pack(obs)
        return Batch(
            rid, obs, result.reward, result.terminated, result.truncated, result.env_id, result.info
        )

    def _action_rows(self, action: Any, rows: int) -> np.ndarray[Any, Any]:
        """`action` as rows, one per env of the batch, each in the action space: int64 for
        a discrete space, else an array of the space's values stacked."""
        if self._actions is None:
            return self._array_rows(action, rows)
        kind = type(action)
        if kind is np.ndarray and action.ndim == 1 and action.dtype.kind in "iu":
            values: Any = action.tolist()  # Python ints: min, max and the checks below are cheaper
        elif kind is list and all(type(a) is int for a in action):
            values = action
        else:
            got = (
                f"an array of {action.dtype.name} and shape {list(action.shape)}"
                if kind is np.ndarray
                else brief(action)
            )
            raise InvalidAction(
                f"a vector session's action must be {rows} integers (an int array of shape "
                f"({rows},) or a list of ints), got {got}"
            )
        if len(values) != rows:
            raise InvalidAction(
                f"a vector session's action must be {rows} integers, one per env of the "
                f"batch, got {len(values)}"
            )
        n = self._actions
        if n is not None and rows and not (min(values) >= 0 and max(values) < n):
            bad = next(int(a) for a in values if not 0 <= a < n)
            raise InvalidAction(f"action {bad} is outside the action space (0..{n - 1})")
        try:
            return np.asarray(values, dtype=np.int64)
        except OverflowError:
            raise InvalidAction(f"an action of {brief(action)} is outside 64 bits") from None

    def _array_rows(self, action: Any, rows: int) -> np.ndarray[Any, Any]:
        """`action` as the actions of a space other than a discrete one: an array whose
        first dimension is the envs, each row a value of the space."""
        space = self._spec.action
        kind = space.to_wire()["type"]
        if type(action) is not np.ndarray or action.ndim == 0:
            raise InvalidAction(
                f"a vector session's action must be an array of {rows} rows of its "
                f"'{kind}' action space, got {brief(action)}"
            )
        if len(action) != rows:
            raise InvalidAction(
                f"a vector session's action must have {rows} rows, one per env of the "
                f"batch, got {len(action)}"
            )
        if isinstance(space, ArraySpec):
            problem = space.check(action, rows)
            if problem is not None:
                raise InvalidAction(
                    f"the actions are not {rows} values of the action space: {problem}"
                )
            return action.astype(space.dtype, copy=False)
        for i, row in enumerate(action):
            problem = space.check(row)
            if problem is not None:
                raise InvalidAction(f"the action of row {i} is not in the action space: {problem}")
        return action

    def _order(self, env_ids: Any, pending: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """`env_ids` of a send as int32, checked to be exactly the envs of the last batch."""
        ids = [int(i) for i in env_ids]
        if sorted(ids) != sorted(int(i) for i in pending):
            duplicated = len(set(ids)) != len(ids)
            raise InvalidAction(
                f"env_ids {brief(ids)} are not the envs of the previous batch "
                f"{brief([int(i) for i in pending])}"
                + (" (an env id is repeated)" if duplicated else "")
                + "; send one action to each env of the batch just received"
            )
        return np.asarray(ids, dtype=np.int32)

    def _reset_ids(self, options: Mapping[str, Any]) -> np.ndarray[Any, Any] | None:
        """The ``env_ids`` option of a reset, checked; None: every env."""
        unknown = sorted(set(options) - {"env_ids"})
        if unknown:
            raise EnvConfigError(
                f"unknown reset option(s) {brief_keys(unknown)} in a vector session; known: env_ids"
            )
        if "env_ids" not in options or options["env_ids"] is None:
            return None
        raw = options["env_ids"]
        if self.batch_size != self.num_envs:
            raise InvalidState(
                "a reset of some envs (options env_ids) needs a synchronous vector session; "
                f"this one is asynchronous (batch_size {self.batch_size} of {self.num_envs})",
                code="unsupported",
            )
        if self.pending is None:
            raise InvalidState(
                "a reset of some envs (options env_ids) needs a reset of every env first",
                code="not_reset",
            )
        ok = (type(raw) is list and all(type(i) is int for i in raw)) or (
            type(raw) is np.ndarray and raw.ndim == 1 and raw.dtype.kind in "iu"
        )
        ids = [int(i) for i in raw] if ok else []
        if not ok or not all(0 <= i < self.num_envs for i in ids) or len(set(ids)) != len(ids):
            raise EnvConfigError(
                f"reset option env_ids must be distinct env ids in 0..{self.num_envs - 1}, "
                f"got {brief(raw)}"
            )
        return np.asarray(ids, dtype=np.int32)

    def _state(self) -> dict[str, Any]:
        return {
            **self.venv.state(),
            "num_envs": self.num_envs,
            "batch_size": self.batch_size,
            "autoreset_mode": self.venv.autoreset_mode,
            "step_count": self.batches,
            "reset_count": self.resets,
        }
