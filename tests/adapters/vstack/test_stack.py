"""Stacking structured values without a socket: :class:`Stacked` against Gymnasium's
``concatenate``, :func:`unstack` against its ``iterate``, for a space holding every
section 22 space nested in a Dict and a Tuple."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from openenv_ws.client._batch import Batcher
from openenv_ws.client._stack import Stacked, single, unstack
from openenv_ws.gymspaces import JsonSpace, space_of, to_gym, to_wire
from openenv_ws.protocol import Result
from openenv_ws.spaces import ArraySpec, JsonSpec

N = 4

EVERY = spaces.Dict(
    {
        "image": spaces.Box(0, 255, (3, 2, 3), np.uint8),
        "pos": spaces.Box(np.array([-1.0, -2.0]), np.array([1.0, 2.0]), dtype=np.float64),
        "score": spaces.Discrete(7, start=-3),
        "keys": spaces.MultiBinary([2, 2]),
        "dial": spaces.MultiDiscrete([3, 5], start=[1, 0], dtype=np.int32),
        "word": spaces.Text(5, charset="abc"),
        "pair": spaces.Tuple(
            (spaces.Discrete(2), spaces.Dict({"name": spaces.Text(3), "v": spaces.Box(-1, 1)}))
        ),
    }
)
SPACES = {
    "every": EVERY,
    "tuple": spaces.Tuple((spaces.Discrete(32), spaces.Discrete(11), spaces.Discrete(2))),
    "text": spaces.Text(8, charset="xyz"),
    "discrete": spaces.Discrete(5, start=2),
    "multi_binary": spaces.MultiBinary(6),
}


def samples(space: gymnasium.Space[Any], n: int, seed: int) -> list[Any]:
    space.seed(seed)
    return [space.sample() for _ in range(n)]


def gym_stack(space: gymnasium.Space[Any], values: list[Any]) -> Any:
    """What Gymnasium's vector envs hand out for one value of `space` per env."""
    out: Any = create_empty_array(space, len(values))
    return concatenate(space, values, out)


@pytest.mark.parametrize("name", SPACES)
def test_stacked_equals_gymnasium_concatenate(name: str) -> None:
    space = SPACES[name]
    spec = space_of(space)
    stacked = Stacked(spec, N)
    for seed in range(3):
        values = samples(space, N, seed)
        for r, value in enumerate(values):
            stacked[r] = to_wire(spec, value)
        want = gym_stack(space, values)
        got = stacked.copy()
        assert data_equivalence(got, want, exact=True), (got, want)
        assert batch_space(space, N).contains(got)
        assert data_equivalence(stacked.buffers(), want, exact=True)


def test_copy_is_a_copy_and_buffers_are_the_buffer() -> None:
    spec = space_of(EVERY)
    stacked = Stacked(spec, N)
    for r, value in enumerate(samples(EVERY, N, 0)):
        stacked[r] = to_wire(spec, value)
    copied, kept = stacked.copy(), stacked.buffers()
    assert copied["pos"] is not kept["pos"]
    assert kept["pos"] is stacked.buffers()["pos"]
    before = copied["image"].copy()
    stacked[0] = to_wire(spec, samples(EVERY, 1, 9)[0])
    np.testing.assert_array_equal(copied["image"], before)
    assert kept["word"] == copied["word"]  # a tuple of strings: never changed in place


def test_first_rows_write_into_their_own_buffer() -> None:
    spec = space_of(EVERY)
    stacked = Stacked(spec, N)
    head = stacked.like()[:2]
    values = samples(EVERY, 2, 1)
    for r, value in enumerate(values):
        head[r] = to_wire(spec, value)
    want = gym_stack(EVERY, values)
    assert data_equivalence(head.copy(), want, exact=True)
    assert not stacked.copy()["pos"].any()  # the buffer it was made like is untouched


def test_single_is_the_form_of_one_value_the_gymnasium_adapter_gives() -> None:
    spec = space_of(EVERY)
    value = samples(EVERY, 1, 3)[0]
    wire = to_wire(spec, value)
    got = single(spec, wire)
    assert isinstance(got["pair"], tuple) and type(got["score"]) is int
    assert got["pos"] is not wire["pos"] and got["pos"].flags.writeable
    assert data_equivalence(got, to_gym(spec, wire), exact=True)  # as RemoteEnv gives it


@pytest.mark.parametrize("name", SPACES)
def test_unstack_equals_gymnasium_iterate(name: str) -> None:
    space = SPACES[name]
    spec = space_of(space)
    batched = batch_space(space, N)
    batched.seed(5)
    for _ in range(3):
        actions = batched.sample()
        want = [to_wire(spec, a) for a in iterate(batched, actions)]
        got = unstack(spec, actions, N)
        assert len(got) == N
        for g, w in zip(got, want, strict=True):
            assert data_equivalence(g, w, exact=True), (g, w)
            assert spec.check(g) is None


def test_unstack_refuses_a_batch_of_another_layout() -> None:
    spec = space_of(EVERY)
    actions = batch_space(EVERY, N).sample()
    with pytest.raises(ValueError, match=r"actions\['pos'\] must have a first axis of 4"):
        unstack(spec, actions | {"pos": actions["pos"][:3]}, N)
    with pytest.raises(ValueError, match=r"actions must be a dict with the keys"):
        unstack(spec, [actions] * N, N)
    with pytest.raises(ValueError, match=r"actions\['word'\] must be a sequence of 4"):
        unstack(spec, actions | {"word": "abc"}, N)
    with pytest.raises(ValueError, match=r"actions\['pair'\] must be a tuple of 2 items"):
        unstack(spec, actions | {"pair": actions["pair"][:1]}, N)


def test_json_values_stack_as_a_tuple() -> None:
    """A custom space (an OpenEnv model's) is a tuple of values, as Gymnasium stacks one."""
    space = JsonSpace({"type": "object"}, "Obs")
    spec = space_of(space)
    assert isinstance(spec, JsonSpec)
    stacked = Stacked(spec, 2)
    stacked[0], stacked[1] = {"a": 1}, {"a": [2]}
    want = gym_stack(space, [{"a": 1}, {"a": [2]}])
    assert stacked.copy() == want == ({"a": 1}, {"a": [2]})


def test_batcher_of_a_structured_space_in_both_layouts() -> None:
    """The vector client's batches: rows by env id (unanswered envs keep theirs) or by
    arrival, same-step finals as Gymnasium's one-env values."""
    spec = space_of(EVERY)
    values = [to_wire(spec, v) for v in samples(EVERY, N, 2)]
    batcher = Batcher(N, spec, copy=True)
    arrivals = [(i, Result(i, values[i], 1.0, False, False, False, {})) for i in range(N)]
    obs, *_ = batcher.batch([(*a, None) for a in arrivals], by_id=True)
    want = gym_stack(EVERY, [single(spec, v) for v in values])
    assert data_equivalence(obs, want, exact=True)
    ended = Result(9, values[0], 2.0, True, False, True, {"k": 1})
    obs, rewards, terms, _, infos = batcher.batch(
        [(3, ended, (values[1], {"last": 5})), (1, arrivals[2][1], None)], by_id=False
    )
    assert data_equivalence(obs["pos"], np.stack([values[0]["pos"], values[2]["pos"]]), True)
    assert obs["word"] == (values[0]["word"], values[2]["word"])
    assert rewards.tolist() == [2.0, 1.0] and terms.tolist() == [True, False]
    assert infos["env_id"].tolist() == [3, 1]
    assert infos["final_obs"][1] is None and infos["_final_obs"].tolist() == [True, False]
    assert data_equivalence(infos["final_obs"][0], single(spec, values[1]), exact=True)
    assert infos["final_info"]["last"].tolist() == [5, 0]


def test_batcher_of_an_array_space_is_unchanged() -> None:
    batcher = Batcher(2, ArraySpec((2,), "float32"), copy=False)
    obs, *_ = batcher.batch(
        [(0, Result(1, np.ones(2, np.float32), 0.0, False, False, False, {}), None)], by_id=True
    )
    assert obs is batcher.obs and obs.dtype == np.float32
