"""Stable-Baselines3 adapter: remote sessions as a ``stable_baselines3`` ``VecEnv``.

Any SB3 algorithm trains on a server's environments as it would on a
``DummyVecEnv``::

    from stable_baselines3 import PPO
    from openenv_ws.sb3 import GameMonitor, RemoteVecEnv

    config = {"game": "breakout", "obs_type": "grayscale", "img_height": 84, "img_width": 84,
              "stack_num": 4, "maxpool": True, "noop_max": 30, "episodic_life": True,
              "reward_clipping": True, "use_fire_reset": True}   # SB3's AtariWrapper
    env = GameMonitor(RemoteVecEnv("ws://127.0.0.1:8000", 8, config=config))  # statistics
    PPO("CnnPolicy", env).learn(100_000)

:class:`GameMonitor` is the one line that gives ``ep_rew_mean`` and
``ep_len_mean``: SB3's ``VecMonitor`` for games, one episode per real game
(not per life), its return unclipped even when the server clips rewards
(``info["reward"]``), its length in emulator frames as SB3's ``Monitor``
counts them under ``AtariWrapper``. Without it SB3 logs no episodes.

The envs reset themselves on the step that ends an episode (SB3's rule): that
step returns the new episode's first observation, ``infos[i]`` is the ending
step's info with ``"terminal_observation"`` (its last observation) and
``"TimeLimit.truncated"``, and the new episode's reset info is in
``reset_infos[i]``. ``step_async`` sends the actions and returns at once, so
the policy's work overlaps the server's; ``step_wait`` collects the results.

Requires ``stable-baselines3`` (``pip install 'openenv-ws[sb3]'``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvStepReturn

from .client._batch import StepBatch
from .client.vector import VectorEnvClient
from .environment import DiscreteSpec
from .errors import EnvConfigError, InvalidState
from .gym import client_seed, is_rgb, open_vector_client, space_from_spec

__all__ = ["GameMonitor", "RemoteVecEnv"]

#: What get_attr answers for each env: these live on this side of the connection.
_ATTRIBUTES = ("render_mode", "metadata", "observation_space", "action_space", "spec_extra")
#: What env_method can call on each env.
_METHODS = ("get_action_meanings", "render")
#: Info keys a same-step vector session's row holds of the step that ended (SPEC section 21,
#: item 6): EnvPool's raw reward and real game over.
_ENDING_KEYS = ("reward", "terminated")
#: Info keys of the vector layout that are not one env's info.
_VECTOR_KEYS = frozenset({"env_id", "final_obs", "final_info"})


class RemoteVecEnv(VecEnv):
    """``num_envs`` remote envs as a Stable-Baselines3 ``VecEnv``.

    Args:
        urls: the server's URL (several only with ``session="per_env"``:
            env ``i`` uses ``urls[i % len(urls)]``).
        num_envs: number of envs (default: one per URL).
        config: the configuration of every env.
        session: ``"vector"`` (default): one vector session steps all envs
            on the server (Atari: ale-py's threaded vector engine);
            ``"per_env"``: one session per env (:class:`VectorEnvClient`),
            e.g. for servers without vector sessions or several servers.
        render_mode: None or ``"rgb_array"`` (each env's last observation,
            tiled by ``render()``; RGB image observations only).
        **client_kwargs: passed to the client (``token``, ``timeout``, ...).

    Raises:
        ValueError: an argument the chosen session cannot take.
        EnvConfigError: ``render_mode="rgb_array"`` without RGB observations.
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        num_envs: int | None = None,
        *,
        config: dict[str, Any] | None = None,
        session: str = "vector",
        render_mode: str | None = None,
        **client_kwargs: Any,
    ) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        if "autoreset_mode" in client_kwargs:
            raise ValueError(
                "autoreset_mode is fixed: Stable-Baselines3 resets an env on the step that "
                "ends its episode ('same_step')"
            )
        if client_kwargs.get("batch_size") not in (None, num_envs):
            raise ValueError(
                "batch_size is num_envs: Stable-Baselines3 steps every env together (an "
                "asynchronous session is for send/recv on the client itself)"
            )
        self.client = open_vector_client(
            urls,
            num_envs,
            session=session,
            config=config,
            autoreset_mode="same_step",
            **client_kwargs,
        )
        spec = self.client.spec
        if render_mode is not None and not is_rgb(spec.observation):
            self.client.close()
            raise EnvConfigError(
                f"render_mode='rgb_array' needs RGB image observations; this session sends "
                f"{spec.observation}"
            )
        self.session = session
        self.spec_extra = spec.extra
        self._render_mode = render_mode
        self._waiting = False
        self._last_obs: np.ndarray[Any, Any] | None = None
        super().__init__(
            self.client.num_envs, space_from_spec(spec.observation), space_from_spec(spec.action)
        )

    # ------------------------------------------------------------------ VecEnv

    def reset(self) -> np.ndarray[Any, Any]:
        """Reset every env with the seeds of :meth:`seed` (used once) and return the observations.

        A step sent with :meth:`step_async` and not collected is collected
        and dropped first.

        Raises:
            ValueError: envs were given different reset options (``set_options``).
        """
        if self._waiting:
            self._collect()
        options = self._options[0]
        if any(o != options for o in self._options):
            raise ValueError(
                "set_options gave the envs different reset options; one reset sends the "
                "same options to every env"
            )
        kwargs: dict[str, Any] = {"seed": client_seed(self.client, self._seeds)}
        if options:
            kwargs["options"] = options
        obs, infos = self.client.reset(**kwargs)
        self._reset_seeds()
        self._reset_options()
        rows = _env_rows(infos, self.num_envs)
        self.reset_infos = _env_infos(infos, rows)
        if rows != list(range(self.num_envs)):
            obs = obs[np.argsort(rows)]
        self._last_obs = obs
        return obs

    def step_async(self, actions: np.ndarray[Any, Any]) -> None:
        """Send one action per env and return without waiting for the results.

        Raises:
            InvalidState: the previous step was not collected with :meth:`step_wait`.
            ValueError: ``actions`` is not one action per env.
        """
        if self._waiting:
            raise InvalidState("step_async() twice without step_wait(); collect the results first")
        self.client.send(actions)
        self._waiting = True

    def step_wait(self) -> VecEnvStepReturn:
        """The results of the step sent with :meth:`step_async`.

        Returns:
            ``(obs, rewards, dones, infos)``: arrays with one row per env and
            a list of one info dict per env.

        Raises:
            InvalidState: no step was sent.
        """
        if not self._waiting:
            raise InvalidState("step_wait() without step_async(); send the actions first")
        obs, rewards, terminations, truncations, infos = self._collect()
        rows = _env_rows(infos, self.num_envs)
        env_infos = _env_infos(infos, rows)
        dones = terminations | truncations
        ends = np.flatnonzero(dones)
        if len(ends):
            finals = _env_infos(infos["final_info"], rows)
            final_obs = infos["final_obs"]
            for end in ends:
                # SB3 keeps the ending step's info; the new episode's goes to reset_infos.
                i = rows[end]
                self.reset_infos[i] = env_infos[i]
                env_infos[i] = finals[i]
                if not finals[i]:  # a vector session's row: the ended step's reward and flags
                    row = self.reset_infos[i]
                    env_infos[i] = {k: row[k] for k in _ENDING_KEYS if k in row}
                env_infos[i]["terminal_observation"] = final_obs[end]
        for r, i in enumerate(rows):
            env_infos[i]["TimeLimit.truncated"] = bool(truncations[r] and not terminations[r])
        if rows != list(range(self.num_envs)):
            order = np.argsort(rows)
            obs, rewards, dones = obs[order], rewards[order], dones[order]
        self._last_obs = obs
        return obs, rewards.astype(np.float32), dones, env_infos

    def _collect(self) -> StepBatch:
        self._waiting = False
        if isinstance(self.client, VectorEnvClient):
            return self.client.recv(min_envs=self.num_envs)
        return self.client.recv()

    def close(self) -> None:
        """Close the sessions. Idempotent."""
        client = self.__dict__.get("client")
        if client is not None:
            client.close()

    # ------------------------------------------------------------------ the envs' attributes

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """An attribute of each env among those this side knows (``render_mode``,
        ``metadata``, ``observation_space``, ``action_space``, ``spec_extra``).

        Raises:
            AttributeError: any other name (the envs live on the server).
        """
        ids = self._indices(indices)
        if attr_name == "render_mode":
            value: Any = self._render_mode
        elif attr_name == "metadata":
            value = {"render_modes": ["rgb_array"] if is_rgb(self.client.spec.observation) else []}
        elif attr_name in _ATTRIBUTES:
            value = getattr(self, attr_name)
        else:
            raise AttributeError(
                f"a remote env has no attribute {attr_name!r} on this side; the envs live on "
                f"the server, which shares {', '.join(_ATTRIBUTES)}"
            )
        return [value for _ in ids]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Always refused: an env's settings are its session's configuration.

        Raises:
            AttributeError: always.
        """
        raise AttributeError(
            f"cannot set {attr_name!r} on remote envs: they live on the server; open the "
            "envs with another config= instead"
        )

    def env_method(
        self,
        method_name: str,
        *method_args: Any,
        indices: VecEnvIndices = None,
        **method_kwargs: Any,
    ) -> list[Any]:
        """Call ``get_action_meanings`` or ``render`` for each env (no arguments).

        Raises:
            AttributeError: any other method (the envs live on the server).
            TypeError: arguments were given.
        """
        ids = self._indices(indices)
        if method_name not in _METHODS:
            raise AttributeError(
                f"cannot call {method_name!r} on remote envs: they live on the server; "
                f"env_method offers {', '.join(_METHODS)}"
            )
        if method_args or method_kwargs:
            raise TypeError(f"{method_name}() takes no arguments on a remote env")
        if method_name == "render":
            images = self.get_images()
            return [images[i] for i in ids]
        action = self.client.spec.action
        meanings = list(action.meanings) if isinstance(action, DiscreteSpec) else []
        return [list(meanings) for _ in ids]

    def env_is_wrapped(
        self,
        wrapper_class: type[gymnasium.Wrapper[Any, Any, Any, Any]],
        indices: VecEnvIndices = None,
    ) -> list[bool]:
        """False for each env: no Gymnasium wrapper runs on this side of the connection."""
        return [False for _ in self._indices(indices)]

    def get_images(self) -> Sequence[np.ndarray[Any, Any] | None]:
        """Each env's last observation when ``render_mode="rgb_array"`` (else Nones)."""
        if self._render_mode != "rgb_array" or self._last_obs is None:
            return [None] * self.num_envs
        return [np.array(frame) for frame in self._last_obs]

    def _indices(self, indices: VecEnvIndices) -> list[int]:
        if indices is None:
            return list(range(self.num_envs))
        ids = [int(indices)] if isinstance(indices, int | np.integer) else [int(i) for i in indices]
        for i in ids:
            if not 0 <= i < self.num_envs:
                raise IndexError(f"env index {i} is not in [0, {self.num_envs})")
        return ids

    def __repr__(self) -> str:
        return f"RemoteVecEnv(num_envs={self.num_envs}, session={self.session!r})"


class GameMonitor(VecEnvWrapper):
    """SB3's ``VecMonitor`` for games: ``info["episode"]`` once per real game.

    An episode that ends at a lost life under ``episodic_life``
    (``info["terminated"]`` false) does not end the game; the game's return
    sums the raw rewards (``info["reward"]`` under ``reward_clipping``, else
    the reward); its length ``l`` counts emulator frames as SB3's ``Monitor``
    does under ``AtariWrapper``: agent steps times the session's ``frameskip``
    (1 for other environments; a reset's NOOPs are not counted). ``t`` is
    seconds since the wrapper was made, as SB3's. Wrap the
    :class:`RemoteVecEnv` (or any ``VecEnv`` with these infos) directly.
    """

    def __init__(self, venv: VecEnv) -> None:
        super().__init__(venv)
        self._returns = np.zeros(self.num_envs)
        self._steps = np.zeros(self.num_envs, np.int64)
        self._start = time.time()
        extra = getattr(venv, "spec_extra", None) or {}
        skip = extra.get("config", {}).get("frameskip", 1) if isinstance(extra, dict) else 1
        self._frames_per_step = skip if type(skip) is int else 1

    def reset(self) -> Any:
        obs = self.venv.reset()
        self._returns[:] = 0
        self._steps[:] = 0
        return obs

    def step_wait(self) -> VecEnvStepReturn:
        obs, rewards, dones, infos = self.venv.step_wait()
        for i, info in enumerate(infos):
            self._returns[i] += float(info.get("reward", rewards[i]))
            self._steps[i] += 1
            if not dones[i] or not (info.get("terminated", True) or _truncated(info)):
                continue
            info["episode"] = {
                "r": float(self._returns[i]),
                "l": int(self._steps[i] * self._frames_per_step),
                "t": round(time.time() - self._start, 6),
            }
            self._returns[i] = 0.0
            self._steps[i] = 0
        return obs, rewards, dones, infos


def _truncated(info: dict[str, Any]) -> bool:
    return bool(info.get("TimeLimit.truncated", False))


def _env_rows(infos: dict[str, Any], n: int) -> list[int]:
    """The env of each row of a batch: ``infos["env_id"]``, or row ``r`` is env ``r``."""
    ids = infos.get("env_id")
    return list(range(n)) if ids is None else [int(i) for i in ids]


def _env_infos(infos: dict[str, Any], rows: list[int]) -> list[dict[str, Any]]:
    """Gymnasium's vector infos (arrays with ``_`` masks) as one dict per env;
    row ``r`` of the arrays is env ``rows[r]``."""
    out: list[dict[str, Any]] = [{} for _ in rows]
    for key, value in infos.items():
        if key.startswith("_") or key in _VECTOR_KEYS:
            continue
        mask = infos.get("_" + key)
        nested = _env_infos(value, rows) if isinstance(value, dict) else None
        for r, i in enumerate(rows):
            if mask is None or mask[r]:
                out[i][key] = value[r] if nested is None else nested[i]
    return out
