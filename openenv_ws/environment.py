"""The server-side environment interface and its spec types.

A server owns one :class:`Environment` per session, made by an
:data:`EnvFactory` from the ``config`` map of the session's ``open`` frame.
Everything an environment returns is plain data (numbers, strings, numpy
arrays, lists and maps of those) so it can travel in protocol v1 frames.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

# The values of a vector session's ``autoreset_mode`` config key (SPEC section 21),
# as environment plugins import them from here.
from .autoreset import SESSION_AUTORESET_MODES as AUTORESET_MODES
from .errors import InvalidState
from .spaces import ArraySpec, DiscreteSpec, Space, space_from_wire

__all__ = [
    "AUTORESET_MODES",
    "MAX_BATCH_OBS_BYTES",
    "ArraySpec",
    "BatchResult",
    "DiscreteSpec",
    "EnvFactory",
    "EnvResult",
    "EnvSpec",
    "Environment",
    "Pace",
    "VectorEnvironment",
    "VectorFactory",
    "check_batch_obs",
]


@dataclass(frozen=True, slots=True)
class EnvSpec:
    """What a session offers: its action and observation spaces, plus extras."""

    action: Space
    observation: Space
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        return {
            "action": self.action.to_wire(),
            "observation": self.observation.to_wire(),
            **self.extra,
        }

    @classmethod
    def from_wire(cls, spec: Mapping[str, Any]) -> EnvSpec:
        """Rebuild a spec from the ``spec`` map of an ``opened`` frame.

        Raises:
            SpaceError: a space that is not one of section 22's.
        """
        extra = {k: v for k, v in spec.items() if k not in ("action", "observation")}
        return cls(
            action=space_from_wire(spec["action"]),
            observation=space_from_wire(spec["observation"]),
            extra=extra,
        )


@dataclass(slots=True)
class EnvResult:
    """The outcome of ``reset``, ``step`` or ``restore``."""

    #: An array for an array space; otherwise the value of the observation space
    #: (an int, a string, a map or a list of those and arrays).
    obs: Any
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


class Environment(abc.ABC):
    """One environment instance, owned by exactly one session.

    Implementations raise :class:`~openenv_ws.errors.InvalidAction` for an
    action outside the action space; any other exception ends the session
    with the ``internal`` error code.
    """

    @property
    @abc.abstractmethod
    def spec(self) -> EnvSpec:
        """The action and observation spaces of this instance."""

    @abc.abstractmethod
    def reset(
        self,
        *,
        seed: int | None = None,
        episode_id: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> EnvResult:
        """Start a new episode; with a seed, the episode is reproducible."""

    #: True if every call of this instance (reset, step, state, snapshot, restore)
    #: returns within a bounded time, fixed by its config's limits (e.g. Atari:
    #: at most 64 emulator frames a step). Servers then call it inline on their
    #: event loop, the fastest way. False (the default, for environments that
    #: may take long or never return): each call runs on a worker thread of its
    #: session under the server's per-call deadline (``step_timeout``, SPEC
    #: section 7), so a slow call delays only its own session. An instance may
    #: set its own value in ``__init__`` (e.g. from its config).
    inline: bool = False

    #: True if its calls hold the GIL while they work (an emulator's C calls):
    #: on worker threads, such calls are made one at a time per process (SPEC
    #: section 7), since each thread more that wants the GIL delays the event
    #: loop's every turn; inline calls are not affected.
    holds_gil: bool = False

    #: True if :meth:`step` takes ``out=``: an array of the observation's shape and
    #: dtype to write the observation into (then returned as ``obs``). The server
    #: passes one when it hands observations over in shared memory, which saves
    #: a copy of every observation.
    writes_obs_into: ClassVar[bool] = False

    @abc.abstractmethod
    def step(self, action: Any, *, obs: bool = True) -> EnvResult:
        """Advance one agent step. With ``obs=False`` the result's ``obs`` may be None."""

    @abc.abstractmethod
    def state(self) -> dict[str, Any]:
        """Episode state: at least ``episode_id`` and ``step_count``."""

    def snapshot(self) -> bytes:
        """An opaque snapshot of the episode, restorable with :meth:`restore`."""
        raise InvalidState(f"{type(self).__name__} does not support snapshots", code="unsupported")

    def restore(self, snapshot: bytes) -> EnvResult:
        """Continue the episode from a snapshot; returns the observation there."""
        raise InvalidState(f"{type(self).__name__} does not support snapshots", code="unsupported")

    def recycle(self) -> bool:
        """Return to the state a new instance of this configuration starts in, for the
        next session; False if it cannot (the caller then closes it).

        A warm pool (:mod:`openenv_ws.server.runtime.pool`) calls this when a session
        ends, so that the next session of the same configuration skips the
        build (for Atari, a ROM load). The next session must not be able to
        tell: no episode running, counters at zero, generators freshly seeded
        at random. Not called on an instance that raised an unexpected error.
        The default cannot.
        """
        return False

    def indexed_frames(self) -> bytes | None:
        """Observe palette indices instead of RGB from now on, if this environment can.

        For RGB observations of shape ``(..., 3)``: observations become uint8
        arrays of shape ``(...)`` whose values index the returned palette (256
        RGB triples, 768 bytes); one may still come in full colour (e.g. after
        a restore). The session sends
        the indices and its client expands them (SPEC section 18). The
        default cannot: None, and observations stay as they are.
        :meth:`recycle` returns the instance to full colour.
        """
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Free the instance's resources. Called once, when the session ends."""


#: Most bytes the observations of one batch of a vector session may take
#: (``num_envs`` observations): an engine holds at least that much per session.
MAX_BATCH_OBS_BYTES = 256 << 20


def check_batch_obs(num_envs: int, shape: Sequence[int], itemsize: int) -> None:
    """Refuse a vector session whose batch of observations would exceed
    :data:`MAX_BATCH_OBS_BYTES`, before anything is built.

    Raises:
        EnvConfigError: naming the sizes and what to lower.
    """
    from .errors import EnvConfigError

    one = itemsize
    for side in shape:
        one *= side
    if num_envs * one > MAX_BATCH_OBS_BYTES:
        raise EnvConfigError(
            f"{num_envs} observations of shape {list(shape)} take {num_envs * one} bytes, above "
            f"the limit of {MAX_BATCH_OBS_BYTES} bytes for one batch; lower num_envs or the "
            "observation size (img_height, img_width, stack_num)"
        )


@dataclass(slots=True)
class BatchResult:
    """The outcome of a vector environment's reset or step: B rows, one per env.

    Attributes:
        obs: the observations, shape ``(B, *obs_shape)``; None when not asked.
        reward: float64, shape ``(B,)``.
        terminated, truncated: bool, shape ``(B,)``.
        env_id: int32, shape ``(B,)``: which env each row is.
        info: name -> array with B rows (Gymnasium's vector layout).
    """

    obs: np.ndarray[Any, Any] | None
    reward: np.ndarray[Any, Any]
    terminated: np.ndarray[Any, Any]
    truncated: np.ndarray[Any, Any]
    env_id: np.ndarray[Any, Any]
    info: dict[str, Any] = field(default_factory=dict)


class VectorEnvironment(abc.ABC):
    """``num_envs`` environments stepped together, owned by one vector session.

    Synchronous when :attr:`batch_size` equals :attr:`num_envs` (every
    batch holds every env, rows in env order); asynchronous (EnvPool style)
    when it is smaller: :meth:`send` hands actions to the envs of the last
    batch and :meth:`recv` returns the next :attr:`batch_size` envs that are
    ready. Actions are the integers of a discrete space. Implementations
    raise :class:`~openenv_ws.errors.InvalidAction` for an action outside the
    action space; any other exception ends the session with ``internal``.
    """

    #: How many envs, and how many rows a batch of :meth:`recv` holds.
    num_envs: int
    batch_size: int
    #: ``"next_step"`` (an env that ended is reset on its next step, Gymnasium's
    #: default) or ``"same_step"`` (at once; the batch carries the final
    #: observation in ``info["final_obs"]``).
    autoreset_mode: str = "next_step"
    #: As :attr:`Environment.inline`: every call returns within a bounded time.
    inline: bool = False

    @property
    @abc.abstractmethod
    def spec(self) -> EnvSpec:
        """The spaces of ONE env; ``extra`` holds ``num_envs``, ``batch_size``,
        ``autoreset_mode`` and what else the session's ``opened`` shows."""

    @abc.abstractmethod
    def reset(
        self, *, seed: int | None = None, env_ids: np.ndarray[Any, Any] | None = None
    ) -> BatchResult:
        """Reset every env (env i seeded with ``seed + i``), or only `env_ids`
        (synchronous only: the batch still has every env, the others as they are).
        Asynchronous: the batch holds the first :attr:`batch_size` envs ready."""

    @abc.abstractmethod
    def send(self, actions: np.ndarray[Any, Any], env_ids: np.ndarray[Any, Any]) -> None:
        """Start a step of each env of `env_ids` (int32, exactly the envs of the last
        batch, any order) with the action in the same row of `actions` (int64)."""

    @abc.abstractmethod
    def recv(self) -> BatchResult:
        """The next batch: :attr:`batch_size` envs whose step is done."""

    def step(self, actions: np.ndarray[Any, Any]) -> BatchResult:
        """Step every env of a synchronous instance, env i with ``actions[i]``."""
        self.send(actions, np.arange(self.num_envs, dtype=np.int32))
        return self.recv()

    def state(self) -> dict[str, Any]:
        """What ``state`` shows beyond the session's own counters."""
        return {}

    def close(self) -> None:  # noqa: B027 - optional hook
        """Free the instances' resources. Called once, when the session ends."""


#: Makes the environment of a session from its ``open`` config.
#: Raises :class:`~openenv_ws.errors.EnvConfigError` for a config it refuses.
EnvFactory = Callable[[dict[str, Any]], Environment]
#: Makes the environments of a vector session from its ``open`` config,
#: ``num_envs`` and ``batch_size``; raises
#: :class:`~openenv_ws.errors.EnvConfigError` for a config it refuses.
VectorFactory = Callable[[dict[str, Any], int, int], VectorEnvironment]

#: The turns of a vector build taken in steps (a vector factory may take it as the
#: keyword ``pace``): called on the building thread with a step's env count, it gives
#: the context to build that step in; entering waits for the step's turn, leaving
#: counts its time. A step holds the GIL at most a few single builds' worth.
Pace = Callable[[int], contextlib.AbstractContextManager[object]]


def check_keys(config: Mapping[str, Any], allowed: Sequence[str], what: str) -> None:
    """Raise EnvConfigError naming any key of `config` not in `allowed`."""
    from .brief import brief_keys
    from .errors import EnvConfigError

    unknown = sorted(set(config) - set(allowed))
    if unknown:
        raise EnvConfigError(
            f"unknown {what} option(s) {brief_keys(unknown)}; known: {', '.join(allowed)}"
        )
