"""Atari as an openenv-ws environment plugin (entry point ``atari``, the default)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from openenv_ws.environment import Pace, VectorEnvironment
from openenv_ws.registry import EnvPlugin

from .config import DEFAULT_CONFIG, OBS_TYPES, games, normalize_config
from .environment import AtariEnvironment
from .footprint import atari_footprint
from .snapshots import SNAPSHOT_KEY_ENV

__all__ = ["AtariVector", "atari_factory", "atari_vector", "web_choices"]


def web_choices() -> Mapping[str, Any]:
    """What the web page offers: the bundled games and the observation types."""
    return {
        "env": "atari",
        "games": games(),
        "obs_types": list(OBS_TYPES),
        "defaults": {"game": DEFAULT_CONFIG["game"], "obs_type": DEFAULT_CONFIG["obs_type"]},
    }


class AtariVector:
    """Atari's vector engine (SPEC section 21, ale-py's), imported on the first vector session."""

    def __call__(
        self, config: dict[str, Any], num_envs: int, batch_size: int, *, pace: Pace | None = None
    ) -> VectorEnvironment:
        """The envs of a vector session, built an engine of a few envs at a time, each in
        a turn of `pace`."""
        from .vector import AtariVectorEnvironment

        return AtariVectorEnvironment(config, num_envs, batch_size, pace=pace)


#: Builds the envs of Atari vector sessions (their threads: :func:`atari.footprint.atari_footprint`).
atari_vector = AtariVector()


#: Makes an :class:`~atari.environment.AtariEnvironment` from a session's config
#: (an :data:`~openenv_ws.environment.EnvFactory`). Configs are checked without
#: a ROM load; servers keep the default game warm; every worker of a server
#: signs snapshots with one key, so a session resumes on any of them.
atari_factory: EnvPlugin[AtariEnvironment] = EnvPlugin(
    AtariEnvironment,
    normalize=normalize_config,
    warm=({},),
    shared_secrets=(SNAPSHOT_KEY_ENV,),
    choices=web_choices,
    vector=atari_vector,
    footprint=atari_footprint,
)
