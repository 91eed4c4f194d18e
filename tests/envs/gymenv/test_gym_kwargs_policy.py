"""The kwargs policy of ``--env gymnasium`` against Gymnasium's own constructors.

Every key the policy allows is a parameter of its id's constructor and takes that
constructor's default; no key names a path or code; every default id has an entry. The
operator's widening parses as documented, and a rendered frame past the bound is refused
whatever the kwargs (the raw-wire attacks are in ``tests/server/hostile/test_gym_kwargs.py``).
"""

from __future__ import annotations

import inspect
from typing import Any

import gymnasium
import numpy as np
import pytest
from gymnasium.envs.mujoco.mujoco_env import MujocoEnv
from gymnasium.envs.registration import load_env_creator

from openenv_ws.client import EnvClient
from openenv_ws.envs.gym_kwargs import (
    COMMON,
    KWARGS_ENV,
    POLICY,
    RENDER_SIDE_MAX,
    check_kwargs,
    parse_widening,
)
from openenv_ws.envs.gymnasium import DEFAULT_IDS, RENDER_KEY, gymnasium_factory, gymnasium_plugin
from openenv_ws.errors import EnvConfigError, RemoteEnvError
from openenv_ws.server import ServerThread, create_app


def _parameters(env_id: str) -> dict[str, inspect.Parameter]:
    """The constructor parameters of `env_id` (a MuJoCo task's include MujocoEnv's)."""
    creator = load_env_creator(gymnasium.spec(env_id).entry_point)  # type: ignore[arg-type]
    found = dict(inspect.signature(creator).parameters)
    if isinstance(creator, type) and issubclass(creator, MujocoEnv):
        found = {**inspect.signature(MujocoEnv.__init__).parameters, **found}
    return found


def test_every_default_id_has_an_entry_and_no_other() -> None:
    assert set(POLICY) == set(DEFAULT_IDS)


@pytest.mark.parametrize("env_id", DEFAULT_IDS)
def test_each_key_is_a_parameter_that_takes_its_default(env_id: str) -> None:
    parameters = _parameters(env_id)
    for key, bound in POLICY[env_id].items():
        assert key in parameters, f"{env_id} takes no {key!r}"
        default = parameters[key].default
        if default is None or default is inspect.Parameter.empty:
            continue
        wire = list(default) if isinstance(default, tuple) else default
        bound.take(wire)  # a default outside its bound would be refused from a client


def test_no_key_names_a_path_or_code() -> None:
    keys = {key for keys in POLICY.values() for key in keys} | set(COMMON)
    words = ("file", "path", "dir", "module", "class", "entry", "fn", "callable", "wrapper")
    assert not [k for k in keys if any(w in k for w in words)]
    assert "render_mode" not in keys  # the server's: asked for with "render": true


def test_bounds_refuse_what_gymnasium_would_take() -> None:
    cases: list[tuple[str, dict[str, Any]]] = [
        ("CartPole-v1", {"sutton_barto_reward": 1}),  # an int is not a flag
        ("Hopper-v5", {"frame_skip": 5.0}),
        ("Hopper-v5", {"frame_skip": True}),
        ("Hopper-v5", {"healthy_z_range": [0.7]}),
        ("Hopper-v5", {"healthy_z_range": [0.7, float("nan")]}),
        ("FrozenLake-v1", {"desc": ["FF", "FG"]}),  # no start
        ("FrozenLake-v1", {"desc": ["SF", "FGX"]}),
        ("FrozenLake-v1", {"desc": "SFFG"}),
        ("FrozenLake-v1", {"map_name": "16x16"}),
        ("Taxi-v4", {"rainy_probability": 1.5}),
    ]
    for env_id, kwargs in cases:
        with pytest.raises(EnvConfigError, match=rf"{next(iter(kwargs))}' of '{env_id}' must be"):
            check_kwargs(env_id, kwargs, {})


def test_the_widening_parses_ids_with_a_module() -> None:
    text = " tests.mod:Thing-v0:alpha, beta ; CartPole-v1:gamma;;CartPole-v1:delta "
    assert parse_widening(text) == {
        "tests.mod:Thing-v0": frozenset({"alpha", "beta"}),
        "CartPole-v1": frozenset({"gamma", "delta"}),
    }
    for bad in ("CartPole-v1", ":x", "CartPole-v1:", "CartPole-v1:a-b", "CartPole-v1:x y"):
        with pytest.raises(EnvConfigError, match="is not of the form ID:KEY,KEY"):
            parse_widening(bad)


def test_the_environment_variable_widens_for_the_ids_it_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = {"id": "Hopper-v5", "kwargs": {"frame_skip": 40}}
    with pytest.raises(EnvConfigError, match=r"'frame_skip' of 'Hopper-v5' must be .* 1\.\.20"):
        gymnasium_factory(config)
    monkeypatch.setenv(KWARGS_ENV, "Hopper-v5:frame_skip")
    env = gymnasium_factory(config)
    try:
        assert env._env.unwrapped.frame_skip == 40  # type: ignore[attr-defined]
    finally:
        env.close()
    with pytest.raises(EnvConfigError, match=r"'frame_skip' of 'Walker2d-v5' must be"):
        gymnasium_factory({"id": "Walker2d-v5", "kwargs": {"frame_skip": 40}})


class _Canvas(gymnasium.Env[np.ndarray, int]):
    """Renders a black frame of `height` x `width` (an operator's id: its kwargs are widened)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}  # noqa: RUF012
    observation_space = gymnasium.spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self, render_mode: str | None = None, height: int = 8, width: int = 8) -> None:
        self.render_mode = render_mode
        self._shape = (height, width, 3)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        return np.zeros(1, np.float32), 0.0, False, False, {}

    def render(self) -> np.ndarray:
        return np.zeros(self._shape, np.uint8)


def test_frames_past_the_bound_are_refused_whatever_the_kwargs() -> None:
    gymnasium.register("Canvas-v0", entry_point=_Canvas)
    plugin = gymnasium_plugin(("Canvas-v0",), {"Canvas-v0": ("height", "width")})
    side = RENDER_SIDE_MAX
    with ServerThread(create_app(plugin)) as srv:
        config = {"id": "Canvas-v0", RENDER_KEY: True, "kwargs": {"height": side, "width": side}}
        with EnvClient(srv.url, config=config) as env:
            assert env.reset(seed=0).info[RENDER_KEY].shape == (side, side, 3)
        config["kwargs"] = {"height": side + 1, "width": side}
        with EnvClient(srv.url, config=config) as env:
            for _ in range(2):  # not fatal
                with pytest.raises(RemoteEnvError, match=rf"{side + 1}x{side} pixels, more") as e:
                    env.reset(seed=0)
                assert e.value.code == "unsupported"
            assert env.state()["id"] == "Canvas-v0"
