"""What an Atari session takes before it is built (``EnvPlugin.footprint``, SPEC section 9).

Calibrated on ale-py 0.12 by resident memory after a reset and a few steps
(``benchmarks/README.md``, budgets): a single session is ~0.7 MB at the native
RGB screen plus its frames; ale-py's vector engine keeps about seven copies of
each env's (stacked) frame in its queues and buffers. The figures below round
those up and add the reply being encoded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from openenv_ws.footprint import MIB, Footprint

from .config import normalize_config, obs_bytes

__all__ = ["atari_footprint"]

#: An emulator, its ROM and its Python objects.
_SINGLE_BASE = 1 * MIB
#: An env of ale-py's vector engine.
_VECTOR_BASE = 2 * MIB
#: Frames a single session holds beside its stack and the reply being encoded: the
#: screens a step is made from (max-pool, resize, grayscale).
_SINGLE_FRAMES = 4
#: Copies of an env's stacked observation in the vector engine: ~7 measured in one engine,
#: ~9 in the server's engines of 4 envs (a 64-env session of 1024x1024 grayscale stacked 4
#: took 2,648 MB of server RSS).
_VECTOR_COPIES = 10


def atari_footprint(
    config: Mapping[str, Any], num_envs: int | None, batch_size: int | None
) -> Footprint:
    """Memory and engine threads of a session of `config` (`num_envs` None: a single one).

    Raises:
        EnvConfigError: a config the session would refuse.
    """
    if num_envs is None:
        cfg = normalize_config(config)
        one = obs_bytes(cfg)
        frame = one // cfg["stack_num"]
        return Footprint(_SINGLE_BASE + 2 * one + _SINGLE_FRAMES * frame)
    from .vector import vector_kwargs, vector_threads

    cfg, _ = vector_kwargs(config)
    one = obs_bytes(cfg)
    per_env = _VECTOR_BASE + one * _VECTOR_COPIES
    # The batch being encoded is one more observation per env.
    return Footprint(num_envs * (per_env + one), vector_threads(config, num_envs, batch_size))
