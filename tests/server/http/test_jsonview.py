"""The JSON view of frames: every golden frame round-trips, tagged values are checked."""

from __future__ import annotations

import base64
import json
import math
from typing import Any

import numpy as np
import pytest

from openenv_ws import jsonview, protocol
from openenv_ws.errors import ProtocolError
from tests.wire.protocol import vectorlib


def _golden() -> list[dict[str, Any]]:
    v = vectorlib.vectors()
    return [*v["frames"], *v["decode_only"]]


@pytest.mark.parametrize("entry", _golden(), ids=lambda e: e.get("name", e["frame"]["op"]))
def test_every_golden_frame_round_trips_through_its_json_view(entry: dict[str, Any]) -> None:
    frame = vectorlib.frame(entry)
    text = jsonview.frame_to_json(frame)
    json.loads(text)  # plain JSON, whatever the frame holds
    read = (
        jsonview.client_frame_from_json
        if entry["direction"] == "client"
        else jsonview.server_frame_from_json
    )
    back = read(text)
    if type(frame) is protocol.Result and frame.obs is not None:
        # Arrays come back in the wire's byte order, as from MessagePack.
        vectorlib.assert_same(back.obs, frame.obs, "obs")
        back.obs = frame.obs = None
    vectorlib.assert_same(back, frame)
    # The view of the decoded MessagePack frame is the same text: one layout for both.
    assert (
        jsonview.frame_to_json(vectorlib.decoder(entry["direction"])(vectorlib.entry_bytes(entry)))
        == text
    )


def test_an_array_is_a_tagged_object_with_base64_little_endian_bytes() -> None:
    arr = np.arange(6, dtype=">u2").reshape(2, 3)  # big-endian in memory
    view = jsonview.to_json_value(arr)
    assert view == {
        "$ndarray": "uint16",
        "shape": [2, 3],
        "data": base64.b64encode(np.arange(6, dtype="<u2").tobytes()).decode(),
    }
    back = jsonview.from_json_value(view)
    assert back.dtype == np.dtype("<u2") and back.shape == (2, 3)
    assert np.array_equal(back, arr)


def test_bytes_and_nested_values_round_trip() -> None:
    value = {"a": [1, 2.5, None, True, "x", b"\x00\xff"], "b": {"c": np.zeros(0, np.float32)}}
    back = jsonview.from_json_value(json.loads(json.dumps(jsonview.to_json_value(value))))
    assert back["a"] == [1, 2.5, None, True, "x", b"\x00\xff"]
    assert back["b"]["c"].dtype == np.float32 and back["b"]["c"].shape == (0,)


def test_a_map_with_more_keys_than_a_tag_stays_a_map() -> None:
    value = {"$ndarray": "uint8", "shape": [1], "data": "AA==", "other": 1}
    assert jsonview.from_json_value(value) == value
    assert jsonview.from_json_value({"$bytes": "AA==", "x": 1}) == {"$bytes": "AA==", "x": 1}


@pytest.mark.parametrize(
    ("obj", "needle"),
    [
        ({"$ndarray": "complex64", "shape": [1], "data": "AAAAAAAAAAA="}, "dtype 'complex64'"),
        ({"$ndarray": "uint8", "shape": [2], "data": "AA=="}, "needs 2 data bytes"),
        ({"$ndarray": "uint8", "shape": [-1], "data": ""}, "shape must be a list"),
        ({"$ndarray": "uint8", "shape": [1] * 17, "data": "AA=="}, "shape must be a list"),
        ({"$ndarray": "bool", "shape": [1], "data": "Ag=="}, "other than 0 and 1"),
        ({"$ndarray": "uint8", "shape": [1], "data": "!!"}, "not valid base64"),
        ({"$bytes": 3}, "must be a base64 string"),
    ],
)
def test_bad_tagged_values_are_refused_with_a_reason(obj: dict[str, Any], needle: str) -> None:
    with pytest.raises(ProtocolError, match=needle):
        jsonview.from_json_value(obj)


def test_json_requests_get_the_same_checks_as_msgpack_frames() -> None:
    with pytest.raises(ProtocolError) as info:
        jsonview.client_frame_from_json(b'{"op": "step", "id": 4}')
    assert info.value.code == "bad_request" and info.value.request_id == 4
    assert "needs field 'action'" in str(info.value)
    with pytest.raises(ProtocolError) as info:
        jsonview.client_frame_from_json(b'{"op": "reset", "id": 1, "seed": -1}')
    assert info.value.code == "bad_request"
    with pytest.raises(ProtocolError) as info:
        jsonview.client_frame_from_json(b'{"op": "warp", "id": 2}')
    assert info.value.code == "unknown_op"
    with pytest.raises(ProtocolError, match="not valid JSON"):
        jsonview.client_frame_from_json(b"{")
    with pytest.raises(ProtocolError, match="must be an object"):
        jsonview.client_frame_from_json(b"[1]")


def test_defaults_fill_the_envelope_left_out_of_a_body() -> None:
    frame = jsonview.client_frame_from_json(b'{"action": 2}', defaults={"op": "step", "id": 0})
    assert frame == protocol.Step(id=0, action=2, obs=True)
    frame = jsonview.client_frame_from_json(b"", defaults={"op": "state", "id": 7})
    assert frame == protocol.GetState(id=7)


def test_non_finite_floats_are_written_as_python_writes_them() -> None:
    text = jsonview.frame_to_json(protocol.Result(id=1, reward=math.inf, info={"x": math.nan}))
    assert b"Infinity" in text and b"NaN" in text
    back = jsonview.server_frame_from_json(text)
    assert back.reward == math.inf and math.isnan(back.info["x"])
