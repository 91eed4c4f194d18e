"""Send environment output through real protocol v1 frames, as a server would."""

from __future__ import annotations

from openenv_ws.environment import EnvResult
from openenv_ws.protocol import Result, decode_server_frame, encode


def through_the_wire(result: EnvResult, request_id: int = 1) -> Result:
    """Encode `result` as a ``result`` frame and decode it back."""
    frame = decode_server_frame(
        encode(
            Result(
                request_id,
                obs=result.obs,
                reward=result.reward,
                terminated=result.terminated,
                truncated=result.truncated,
                done=result.done,
                info=result.info,
            )
        )
    )
    assert isinstance(frame, Result)
    return frame
