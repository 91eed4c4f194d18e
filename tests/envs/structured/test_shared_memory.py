"""Structured observations on the same host: the largest array of each goes through shared memory.

One array per result (the region's halves take turns, as for array
observations); the others, and small ones, stay inline. The client's values
are copies equal to the environment's, steps later never change them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgpack
import numpy as np
import pytest

from openenv_ws._shm import EXT_SHARED, HEADER, ClientRegion, shared_memory_supported
from openenv_ws.client import EnvClient
from openenv_ws.environment import Environment, EnvResult, EnvSpec
from openenv_ws.protocol import Open, Opened, Reset, Result, Step, decode_server_frame, encode
from openenv_ws.server import ServerThread, create_app
from openenv_ws.spaces import ArraySpec, DictSpec, DiscreteSpec, TextSpec, TupleSpec

from ..._rawwire import RawWS
from ...conftest import UNIT
from .values import assert_same_value

pytestmark = pytest.mark.skipif(
    not shared_memory_supported(), reason="shared memory needs Linux memfds"
)

SPEC = EnvSpec(
    action=DiscreteSpec(4),
    observation=DictSpec(
        (
            ("pixels", ArraySpec((48, 40, 3), "uint8", 0, 255)),
            ("extra", TupleSpec((ArraySpec((40, 40), "uint8", 0, 255), TextSpec(8)))),
            ("pos", ArraySpec((2,), "float32")),
        )
    ),
)


class Pixels(Environment):
    """A Dict observation: a 5,760-byte image, a 1,600-byte one in a Tuple, a small array."""

    inline = True

    def __init__(self, config: dict[str, Any]) -> None:
        self._t = 0

    @property
    def spec(self) -> EnvSpec:
        return SPEC

    def _obs(self) -> dict[str, Any]:
        t = self._t
        grid = np.arange(48 * 40 * 3, dtype=np.int64).reshape(48, 40, 3)
        return {
            "pixels": ((grid * (t + 3)) % 251).astype(np.uint8),
            "extra": [np.full((40, 40), t % 256, np.uint8), f"t{t}"],
            "pos": np.array([t, -t], np.float32),
        }

    def reset(
        self,
        *,
        seed: int | None = None,
        episode_id: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> EnvResult:
        self._t = 0
        return EnvResult(self._obs())

    def step(self, action: Any, *, obs: bool = True) -> EnvResult:
        self._t += 1 + action
        return EnvResult(self._obs(), reward=float(action))

    def state(self) -> dict[str, Any]:
        return {"episode_id": None, "step_count": self._t}


def test_the_largest_array_goes_through_the_region_and_the_rest_inline() -> None:
    region = ClientRegion()
    try:
        with ServerThread(create_app(Pixels)) as server:
            ws = RawWS.to(server.url, timeout=5 * UNIT, headers={HEADER: region.offer()})
            with ws:
                assert ws.headers.get(HEADER) == "ok"
                ws.send(encode(Open(id=1, structured=True)))
                assert isinstance(decode_server_frame(ws.read_frame(5 * UNIT)[1]), Opened)
                ws.send(encode(Reset(id=2)))
                replies = [ws.read_frame(5 * UNIT)[1]]
                ws.send(encode(Step(id=3, action=2)))
                replies.append(ws.read_frame(5 * UNIT)[1])
        for payload in replies:
            codes: list[int] = []

            def hook(code: int, data: bytes, codes: list[int] = codes) -> Any:
                codes.append(code)
                return region.read(data) if code == EXT_SHARED else None

            msgpack.unpackb(payload, ext_hook=hook, raw=False)
            assert sorted(codes) == [1, 1, EXT_SHARED]
        local = Pixels({})
        local.reset()
        last = decode_server_frame(replies[-1], ext_hook=_reading(region))
        assert isinstance(last, Result)
        assert_same_value(last.obs, local.step(2).obs)
    finally:
        region.close()


def _reading(region: ClientRegion) -> Any:
    from openenv_ws.wire.decode import shared_ext_hook

    return shared_ext_hook(region)


def test_the_client_gets_copies_equal_to_the_environment_with_and_without_the_region() -> None:
    with ServerThread(create_app(Pixels)) as server:
        for shared in (True, False):
            local = Pixels({})
            with EnvClient(server.url, shared_memory=shared) as env:
                assert env.shared_memory_used is shared
                kept = [(env.reset().observation, local.reset().obs)]
                for i in range(20):
                    kept.append((env.step(i % 4).observation, local.step(i % 4).obs))
                for got, want in kept:  # later steps changed none of them
                    assert_same_value(got, want)
                    assert not got["pixels"].flags.writeable
