"""Which ``kwargs`` a client may pass to ``gymnasium.make``, per id, and within which bounds.

A Gymnasium constructor takes whatever its author chose: MuJoCo's ``xml_file`` reads any
file of the server (its errors tell apart a missing file, a directory and an XML parse
error; a FIFO blocks the build for good), FrozenLake's ``desc`` of 600x600 takes 1.4 GB and
18 s to build, ``frame_skip: 10**9`` makes one step run for hours and ``width``/``height``
of 5000 make every result carry 75 MB. So a client's ``kwargs`` pass only through
:data:`POLICY`: per id, the keys it may hold, each with its type and range (numbers, flags,
enums, small grids), checked before anything is built and without touching the file
system. No key that names a path, a module, a class or a callable is in it; every id also
takes ``max_episode_steps`` (:data:`COMMON`). Ids without an entry (those an operator adds
with ``--gym-ids``) take only the common keys.

An operator widens the list with ``openenv-ws serve --gym-kwargs ID:KEY,KEY`` (repeatable)
or the environment variable :data:`KWARGS_ENV` (entries joined by ``;``; the option wins
when both are given): a widened key takes any plain value (numbers, strings, bools, None,
lists and string maps), the built-in bound no longer applies, and a path-like key
(``xml_file``) reaches the environment only this way.

A refusal names the key and the id, never echoes what a file holds, and reads the same
whatever the value: the key is refused before any value is looked at.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..brief import brief, brief_keys
from ..errors import EnvConfigError

__all__ = [
    "COMMON",
    "FRAME_SKIP_MAX",
    "GRID_MAX",
    "KWARGS_ENV",
    "POLICY",
    "RENDER_MAX_BYTES",
    "RENDER_SIDE_MAX",
    "Bound",
    "check_kwargs",
    "parse_widening",
    "widened_keys",
]

#: Environment variable: ``ID:KEY,KEY;ID:KEY`` kwargs an operator allows beyond :data:`POLICY`
#: (``serve --gym-kwargs`` sets it for its server and workers).
KWARGS_ENV = "OPENENV_WS_GYM_KWARGS"

#: Most physics steps a MuJoCo step may take (defaults are 2 to 5): a Humanoid step of 20
#: takes about 2 ms on one core.
FRAME_SKIP_MAX = 20
#: Longest side of a rendered MuJoCo frame: at most 1024x1024x3 bytes (3 MiB) a result.
RENDER_SIDE_MAX = 1024
#: Most bytes of one rendered frame in a result, whatever the id and its kwargs.
RENDER_MAX_BYTES = RENDER_SIDE_MAX * RENDER_SIDE_MAX * 3
#: Most rows and columns of a FrozenLake ``desc``: 64x64 builds in about 0.1 s and 8 MB.
GRID_MAX = 64
_INT_MAX = 2**31 - 1
_WEIGHT = 1e6

#: The kinds of value a :class:`Bound` admits.
Kind = Literal["flag", "int", "number", "choice", "numbers", "grid"]


@dataclass(frozen=True)
class Bound:
    """What one kwarg may hold.

    Attributes:
        kind: ``"flag"`` (true or false), ``"int"``, ``"number"`` (an int or a float),
            ``"choice"`` (one of `choices`), ``"numbers"`` (a list of `count` numbers,
            ascending when `ordered`) or ``"grid"`` (FrozenLake's map: rows of equal
            length of the letters S, F, H, G, at least one S).
        low: least value of a number (or of each number in a list).
        high: greatest value likewise; infinities are allowed only when a bound is infinite.
        choices: the values of a ``"choice"``.
        count: the length of a ``"numbers"`` list.
        ordered: a ``"numbers"`` list must not descend (a range ``[low, high]``).
    """

    kind: Kind
    low: float = -math.inf
    high: float = math.inf
    choices: tuple[str, ...] = ()
    count: int = 0
    ordered: bool = False

    def describe(self) -> str:
        """What the bound allows, for a refusal."""
        span = f"{_num(self.low)}..{_num(self.high)}"
        match self.kind:
            case "flag":
                return "true or false"
            case "int":
                return f"an integer in {span}"
            case "number":
                return f"a number in {span}"
            case "choice":
                return "one of " + ", ".join(repr(c) for c in self.choices)
            case "numbers":
                order = ", ascending" if self.ordered else ""
                return f"a list of {self.count} numbers in {span}{order}"
            case _:
                return (
                    f"a list of 1..{GRID_MAX} strings of equal length 1..{GRID_MAX} made of "
                    "the letters S, F, H, G, with at least one S"
                )

    def take(self, value: Any) -> Any:
        """`value` as handed to Gymnasium (a list as a tuple); ValueError if it is outside."""
        match self.kind:
            case "flag" if type(value) is bool:
                return value
            case "int" if type(value) is int and self.low <= value <= self.high:
                return value
            case "number" if self._number(value):
                return value
            case "choice" if type(value) is str and value in self.choices:
                return value
            case "numbers" if (
                type(value) is list
                and len(value) == self.count
                and all(self._number(v) for v in value)
                and (not self.ordered or value == sorted(value))
            ):
                return tuple(value)
            case "grid" if _grid(value):
                return list(value)
        raise ValueError(self.describe())

    def _number(self, value: Any) -> bool:
        if type(value) is int:
            return bool(self.low <= value <= self.high)
        return type(value) is float and self.low <= value <= self.high  # False for NaN


_PLAIN = (bool, int, float, str, type(None))


def _plain(value: Any, where: str) -> Any:
    """`value` if it is plain data (numbers, strings, bools, None, lists and string maps)."""
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, list):
        return [_plain(v, where) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _plain(v, where) for k, v in value.items()}
    raise EnvConfigError(f"{where} must hold plain values, got {brief(value)}")


def _num(x: float) -> str:
    if math.isinf(x):
        return "-inf" if x < 0 else "inf"
    return str(int(x)) if x == int(x) and abs(x) < 1e15 else repr(x)


def _grid(value: Any) -> bool:
    if type(value) is not list or not 1 <= len(value) <= GRID_MAX:
        return False
    if not all(type(row) is str for row in value):
        return False
    width = len(value[0])
    return (
        1 <= width <= GRID_MAX
        and all(len(row) == width and set(row) <= set("SFHG") for row in value)
        and any("S" in row for row in value)
    )


_FLAG = Bound("flag")
_PROBABILITY = Bound("number", 0.0, 1.0)
_WEIGHTED = Bound("number", -_WEIGHT, _WEIGHT)
_RANGE = Bound("numbers", count=2, ordered=True)

#: Keys every id takes (``gymnasium.make``'s own).
COMMON: Mapping[str, Bound] = {"max_episode_steps": Bound("int", 1, _INT_MAX)}

_TOY_TEXT_LAKE: Mapping[str, Bound] = {
    "desc": Bound("grid"),
    "map_name": Bound("choice", choices=("4x4", "8x8")),
    "is_slippery": _FLAG,
    "success_rate": _PROBABILITY,
    "reward_schedule": Bound("numbers", -_WEIGHT, _WEIGHT, count=3),
}
_CLIFF: Mapping[str, Bound] = {"is_slippery": _FLAG}
_MOUNTAIN_CAR: Mapping[str, Bound] = {"goal_velocity": Bound("number", -1.0, 1.0)}

#: What every MuJoCo v5 task takes: physics steps per step and the rendered frame's size.
_MUJOCO: Mapping[str, Bound] = {
    "frame_skip": Bound("int", 1, FRAME_SKIP_MAX),
    "width": Bound("int", 1, RENDER_SIDE_MAX),
    "height": Bound("int", 1, RENDER_SIDE_MAX),
}
_NOISE = "reset_noise_scale"


def _mujoco(
    weights: Iterable[str],
    flags: Iterable[str] = (),
    ranges: Iterable[str] = (),
    *,
    noise: bool = True,
) -> dict[str, Bound]:
    """A MuJoCo task's keys: the common ones, its reward weights, flags and ranges, and
    (`noise`) the scale of the noise added to its initial state."""
    keys = dict(_MUJOCO)
    if noise:
        keys[_NOISE] = Bound("number", 0.0, 10.0)
    keys.update({k: _WEIGHTED for k in weights})
    keys.update({k: _FLAG for k in flags})
    keys.update({k: _RANGE for k in ranges})
    return keys


_EXCLUDE = "exclude_current_positions_from_observation"
_INCLUDES = (
    "include_cinert_in_observation",
    "include_cvel_in_observation",
    "include_qfrc_actuator_in_observation",
    "include_cfrc_ext_in_observation",
)

#: Per id, the kwargs a client may pass and their bounds (Gymnasium 1.4's signatures); every
#: id also takes :data:`COMMON`.
POLICY: Mapping[str, Mapping[str, Bound]] = {
    "Acrobot-v1": {},
    "CartPole-v1": {"sutton_barto_reward": _FLAG},
    "MountainCar-v0": _MOUNTAIN_CAR,
    "MountainCarContinuous-v0": _MOUNTAIN_CAR,
    "Pendulum-v1": {"g": Bound("number", 0.0, 100.0)},
    "Blackjack-v1": {"natural": _FLAG, "sab": _FLAG},
    "CliffWalking-v1": _CLIFF,
    "CliffWalkingSlippery-v1": _CLIFF,
    "FrozenLake-v1": _TOY_TEXT_LAKE,
    "FrozenLake8x8-v1": _TOY_TEXT_LAKE,
    "Taxi-v4": {
        "is_rainy": _FLAG,
        "fickle_passenger": _FLAG,
        "rainy_probability": _PROBABILITY,
        "fickle_probability": _PROBABILITY,
    },
    "Ant-v5": _mujoco(
        ("forward_reward_weight", "ctrl_cost_weight", "contact_cost_weight", "healthy_reward"),
        ("terminate_when_unhealthy", _EXCLUDE, "include_cfrc_ext_in_observation"),
        ("healthy_z_range", "contact_force_range"),
    ),
    "HalfCheetah-v5": _mujoco(("forward_reward_weight", "ctrl_cost_weight"), (_EXCLUDE,)),
    "Hopper-v5": _mujoco(
        ("forward_reward_weight", "ctrl_cost_weight", "healthy_reward"),
        ("terminate_when_unhealthy", _EXCLUDE),
        ("healthy_state_range", "healthy_z_range", "healthy_angle_range"),
    ),
    "Humanoid-v5": _mujoco(
        ("forward_reward_weight", "ctrl_cost_weight", "contact_cost_weight", "healthy_reward"),
        ("terminate_when_unhealthy", _EXCLUDE, *_INCLUDES),
        ("contact_cost_range", "healthy_z_range"),
    ),
    "HumanoidStandup-v5": _mujoco(
        ("uph_cost_weight", "ctrl_cost_weight", "impact_cost_weight"),
        (_EXCLUDE, *_INCLUDES),
        ("impact_cost_range",),
    ),
    "InvertedDoublePendulum-v5": _mujoco(("healthy_reward",)),
    "InvertedPendulum-v5": _mujoco(()),
    "Pusher-v5": _mujoco(
        ("reward_near_weight", "reward_dist_weight", "reward_control_weight"), noise=False
    ),
    "Reacher-v5": _mujoco(("reward_dist_weight", "reward_control_weight"), noise=False),
    "Swimmer-v5": _mujoco(("forward_reward_weight", "ctrl_cost_weight"), (_EXCLUDE,)),
    "Walker2d-v5": _mujoco(
        ("forward_reward_weight", "ctrl_cost_weight", "healthy_reward"),
        ("terminate_when_unhealthy", _EXCLUDE),
        ("healthy_z_range", "healthy_angle_range"),
    ),
}

#: Keys known to name a file or code on the server: refused saying so (unless widened).
_NAMES_A_FILE_OR_CODE = frozenset({"xml_file", "model_path", "entry_point", "wrappers"})


def parse_widening(text: str, where: str = KWARGS_ENV) -> dict[str, frozenset[str]]:
    """``ID:KEY,KEY;ID:KEY`` as {id: keys}; an id may itself hold a colon (``module:Id``).

    Raises:
        EnvConfigError: an entry without ``:``, or a key that is not a Python identifier.
    """
    widened: dict[str, set[str]] = {}
    for entry in (e.strip() for e in text.split(";")):
        if not entry:
            continue
        env_id, colon, keys = entry.rpartition(":")
        names = [k.strip() for k in keys.split(",") if k.strip()]
        bad = [k for k in names if not k.isidentifier()]
        if not colon or not env_id.strip() or not names or bad:
            raise EnvConfigError(
                f"{where}: {brief(entry)} is not of the form ID:KEY,KEY (keys are Python "
                "identifiers, e.g. Hopper-v5:xml_file,frame_skip)"
            )
        widened.setdefault(env_id.strip(), set()).update(names)
    return {env_id: frozenset(keys) for env_id, keys in widened.items()}


def widened_keys() -> dict[str, frozenset[str]]:
    """The operator's widening for this process: :data:`KWARGS_ENV` parsed (empty if unset)."""
    return parse_widening(os.environ.get(KWARGS_ENV, ""))


def check_kwargs(
    env_id: str, kwargs: Mapping[Any, Any], widened: Mapping[str, frozenset[str]]
) -> dict[str, Any]:
    """`kwargs` for ``gymnasium.make(env_id, ...)`` if the policy allows them, as handed over.

    Every key is checked before any value: a key outside the id's list (and the operator's
    `widened` keys) is refused naming it, whatever its value.

    Raises:
        EnvConfigError: a key not allowed for `env_id`, or a value outside its bound.
    """
    bounds = {**COMMON, **POLICY.get(env_id, {})}
    extra = widened.get(env_id, frozenset())
    refused = [k for k in kwargs if not (isinstance(k, str) and (k in bounds or k in extra))]
    if refused:
        allowed = ", ".join(sorted({*bounds, *extra}))
        why = (
            " (it names a file or code on the server)"
            if any(k in _NAMES_A_FILE_OR_CODE for k in refused)
            else ""
        )
        verb = "is" if len(refused) == 1 else "are"
        raise EnvConfigError(
            f"kwargs {brief_keys(refused)} {verb} not allowed for {env_id!r}{why}; allowed: "
            f"{allowed}; "
            f"an operator allows more with `openenv-ws serve --gym-kwargs {env_id}:KEY` or "
            f"the environment variable {KWARGS_ENV}"
        )
    checked: dict[str, Any] = {}
    for key, value in kwargs.items():
        if key in extra:
            checked[key] = _plain(value, f"kwargs {key!r}")
            continue
        try:
            checked[key] = bounds[key].take(value)
        except ValueError as exc:
            raise EnvConfigError(
                f"kwargs {key!r} of {env_id!r} must be {exc}, got {brief(value)}"
            ) from None
    return checked
