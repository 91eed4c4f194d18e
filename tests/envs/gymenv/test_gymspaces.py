"""openenv_ws.gymspaces: Gymnasium's spaces and values <-> section 22's, without a socket."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

from openenv_ws.errors import InvalidAction
from openenv_ws.gymspaces import (
    AnyText,
    JsonSpace,
    gym_action,
    gym_space,
    space_of,
    to_gym,
    to_wire,
)
from openenv_ws.protocol import decode_server_frame, encode
from openenv_ws.spaces import (
    ArraySpec,
    DictSpec,
    DiscreteSpec,
    JsonSpec,
    MultiDiscreteSpec,
    SpaceError,
    TextSpec,
    TupleSpec,
    space_from_wire,
)
from openenv_ws.wire.frames import Opened

NESTED = spaces.Dict(
    {
        "img": spaces.Box(0, 255, (4, 4, 3), np.uint8),
        "pos": spaces.Box(np.array([-1.0, 0.0]), np.array([1.0, np.inf]), dtype=np.float64),
        "pair": spaces.Tuple((spaces.Discrete(3, start=-1), spaces.Text(4, charset="ab"))),
        "dial": spaces.MultiDiscrete([[2, 3], [4, 5]], start=[[1, 1], [0, -2]]),
        "keys": spaces.MultiBinary([2, 2]),
    }
)

SPACES = [
    spaces.Box(-1.0, 1.0, (3,), np.float32),
    spaces.Box(-np.inf, np.inf, (2, 2), np.float64),
    spaces.Box(0, 255, (8, 8, 3), np.uint8),
    spaces.Box(np.array([0, -5], np.int16), np.array([7, 5], np.int16), dtype=np.int16),
    spaces.Discrete(5),
    spaces.Discrete(4, start=-2),
    spaces.MultiDiscrete([3, 4, 5]),
    spaces.MultiDiscrete([3, 4], start=[-1, 10], dtype=np.int32),
    spaces.MultiBinary(6),
    spaces.MultiBinary([2, 3]),
    spaces.Text(10),
    spaces.Text(8, min_length=2, charset="xyz"),
    spaces.Tuple((spaces.Discrete(2), spaces.Box(0.0, 1.0, (1,)))),
    NESTED,
]


@pytest.mark.parametrize("space", SPACES, ids=repr)
def test_every_space_survives_the_wire_and_comes_back_equal(space: spaces.Space[Any]) -> None:
    spec = space_of(space)
    opened = Opened(id=1, session_id="s", spec={"observation": spec.to_wire()})
    decoded = decode_server_frame(encode(opened))
    assert isinstance(decoded, Opened)
    back = space_from_wire(decoded.spec["observation"])
    assert back == spec
    assert gym_space(back) == space


@pytest.mark.parametrize("space", SPACES, ids=repr)
def test_sampled_values_go_to_the_wire_and_back(space: spaces.Space[Any]) -> None:
    space.seed(3)
    spec = space_of(space)
    for _ in range(20):
        value = space.sample()
        wire = to_wire(spec, value)
        assert spec.check(wire) is None, (value, wire)
        back = to_gym(spec, wire)
        assert space.contains(back), back
        assert type(back) is type(value) or isinstance(value, np.integer)
        if isinstance(wire, int | str):
            assert to_wire(spec, back) == wire


def test_wire_values_have_wire_types() -> None:
    spec = space_of(NESTED)
    value = NESTED.sample()
    wire = to_wire(spec, value)
    assert list(wire) == list(NESTED.keys())
    assert type(wire["pair"]) is list and type(wire["pair"][0]) is int
    assert type(to_gym(spec, wire)["pair"]) is tuple


def test_uniform_bounds_are_numbers_and_per_element_bounds_arrays() -> None:
    assert space_of(spaces.Box(-2.0, 2.0, (3,))) == ArraySpec((3,), "float32", -2.0, 2.0)
    assert space_of(spaces.Box(-np.inf, np.inf, (3,))) == ArraySpec((3,), "float32")
    per = space_of(NESTED["pos"])
    assert isinstance(per, ArraySpec) and isinstance(per.low, np.ndarray)
    assert per.high is not None and np.isinf(per.high[1])  # type: ignore[index]
    assert space_of(spaces.Discrete(4, start=-2)) == DiscreteSpec(4, (), -2)
    md = space_of(spaces.MultiDiscrete([3, 4]))
    assert isinstance(md, MultiDiscreteSpec) and md.start is None


def test_spaces_without_a_wire_form_are_refused() -> None:
    for space in (
        spaces.Sequence(spaces.Discrete(2)),
        spaces.Graph(spaces.Box(0, 1, (2,)), spaces.Discrete(2)),
        spaces.OneOf((spaces.Discrete(2), spaces.Discrete(3))),
    ):
        with pytest.raises(SpaceError, match=f"{type(space).__name__} space has no form"):
            space_of(space)
    with pytest.raises(SpaceError, match="keys must be strings"):
        space_of(spaces.Dict({1: spaces.Discrete(2)}))  # type: ignore[dict-item]


def test_text_without_a_charset_and_json_have_spaces_of_their_own() -> None:
    anytext = gym_space(TextSpec(5))
    assert (
        isinstance(anytext, AnyText) and anytext.contains("é ✓!") and not anytext.contains("x" * 6)
    )
    assert space_of(anytext) == TextSpec(5)
    schema = {"type": "object", "properties": {"message": {"type": "string"}}}
    json_space = gym_space(JsonSpec(schema, "EchoAction"))
    assert isinstance(json_space, JsonSpace) and json_space.contains({"message": "hi"})
    assert space_of(json_space) == JsonSpec(schema, "EchoAction")


def test_a_json_space_samples_the_required_fields_of_its_schema() -> None:
    schema = {
        "$defs": {"Move": {"enum": ["UP", "DOWN"], "type": "string"}},
        "type": "object",
        "properties": {
            "move": {"$ref": "#/$defs/Move"},
            "steps": {"type": "integer", "minimum": 1, "maximum": 3},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "kind": {"const": "go"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "optional": {"type": "number"},
        },
        "required": ["move", "steps", "note", "kind", "tags"],
    }
    space = JsonSpace(schema, "MoveAction")
    space.seed(3)
    value = space.sample()
    assert set(value) == {"move", "steps", "note", "kind", "tags"} and space.contains(value)
    assert value["move"] in ("UP", "DOWN") and 1 <= value["steps"] <= 3
    assert isinstance(value["note"], str) and (value["kind"], value["tags"]) == ("go", [])
    with pytest.raises(SpaceError, match="without a mask"):
        space.sample(mask=np.ones(2, np.int8))
    with pytest.raises(SpaceError, match="does not describe a map"):
        JsonSpace({"type": "string"}).sample()


def test_gym_action_casts_and_refuses() -> None:
    box = ArraySpec((2,), "float32")
    assert gym_action(box, [1, 2]).dtype == np.float32
    assert gym_action(ArraySpec((1,), "float32", -1.0, 1.0), 0.5).tolist() == [0.5]
    with pytest.raises(InvalidAction, match="NaN or infinity"):  # finite as float64 only
        gym_action(box, np.array([1e300, 0.0]))
    nested = space_of(NESTED)
    value = to_wire(nested, NESTED.sample())
    value["keys"] = value["keys"].astype(np.bool_)
    value["pos"] = value["pos"].tolist()
    action = gym_action(nested, value)
    assert action["keys"].dtype == np.int8 and action["pos"].dtype == np.float64
    assert type(action["pair"]) is tuple and NESTED.contains(action)
    with pytest.raises(InvalidAction, match=r"\['pair'\]: \[0\]: an integer is needed, got bool"):
        gym_action(nested, {**value, "pair": [True, "a"]})
    with pytest.raises(InvalidAction, match=r"\[1\]: 2 items, not 2\.\.2|\[1\]: a string"):
        gym_action(TupleSpec((DiscreteSpec(2), TextSpec(2, 2))), [0, 5])
    with pytest.raises(InvalidAction, match="a map is needed"):
        gym_action(DictSpec((("a", DiscreteSpec(2)),)), (0,))
