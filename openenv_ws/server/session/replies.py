"""What a server session answers: its replies (bytes or frames, and the close they
ask for) and the fields of a ``result``, its observation placed as the session sends it."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..._shm import MIN_SHARED_BYTES, ServerRegion, Slot
from ...environment import ArraySpec, Environment, EnvResult
from ...palette import indexed_shape
from ...protocol import ServerFrame, encode
from ...wire.compress import MIN_COMPRESSED_BYTES, ObsPacker

__all__ = [
    "CloseRequest",
    "FrameReply",
    "Reply",
    "ResultFields",
    "encoded",
    "obs_layout",
    "result_fields",
]


class CloseRequest(NamedTuple):
    """The server closes the socket after sending the reply: code and reason."""

    code: int
    reason: str


#: A reply as bytes (WebSocket) and the close the session asks for, if any.
Reply = tuple[bytes, CloseRequest | None]
#: A reply as a frame object (HTTP, OpenEnv's dialect) and the close, if any.
FrameReply = tuple[ServerFrame, CloseRequest | None]

# obs, reward, terminated, truncated, done, info: a ``result`` frame after its id.
ResultFields = tuple[Any, float, bool, bool, bool, dict[str, Any]]


def encoded(reply: FrameReply) -> Reply:
    """A frame reply as bytes."""
    return encode(reply[0]), reply[1]


def obs_layout(env: Environment, indexed: bool) -> tuple[Any, ...]:
    """(shape, dtype) for ``env.step(..., out=)``, or () if the environment cannot take one."""
    spec = env.spec.observation
    if not env.writes_obs_into or not isinstance(spec, ArraySpec):
        return ()
    if indexed:  # palette indices: the RGB shape without its last axis
        return (indexed_shape(spec.shape), np.dtype(np.uint8))
    return (spec.shape, np.dtype(spec.dtype))


def result_fields(
    r: EnvResult,
    done: bool,
    shared: ServerRegion | None,
    slot: Slot | None = None,
    packer: ObsPacker | None = None,
) -> ResultFields:
    """The fields of a ``result`` after `rid`: an observation in the region goes by
    name, one sent inline in a compressed session goes compressed."""
    obs: Any = r.obs
    if slot is not None and obs is slot.view:
        obs = slot.name  # written in place: a SharedArray, encoded as ext type 2
    elif shared is not None:
        kind = type(obs)
        if kind is np.ndarray:
            if obs.nbytes >= MIN_SHARED_BYTES:
                obs = shared.put(obs) or obs
        elif kind is dict or kind is list:  # structured (SPEC section 22)
            obs = shared.put_within(obs)
    if packer is not None and type(obs) is np.ndarray and obs.nbytes >= MIN_COMPRESSED_BYTES:
        obs = packer.pack(obs)
    reward = r.reward
    return (
        obs,
        reward if type(reward) is float else float(reward),
        bool(r.terminated),
        bool(r.truncated),
        done,
        r.info,
    )
