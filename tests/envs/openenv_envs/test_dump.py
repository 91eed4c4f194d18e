"""An OpenEnv model's values on the wire: a plain model read from its stored fields
gives exactly what its ``model_dump`` gives, and every model that serializes
differently goes through ``model_dump``."""

from __future__ import annotations

import enum
from typing import Annotated, Any

import numpy as np
import pytest
from openenv.core.env_server.types import Observation
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    computed_field,
    field_serializer,
    model_serializer,
)

from openenv_ws.envs.openenv.dump import UNSET, dump, stored_fields, wire_value

EXCLUDE = frozenset({"done", "metadata"})


class Colour(enum.Enum):
    RED = "red"


class Inner(BaseModel):
    x: int = 1


class Plain(Observation):
    text: str = "hi"
    n: int = 3
    ratio: Annotated[float, Field(ge=0)] = 0.5
    tags: list[str] = Field(default_factory=lambda: ["a"])
    pair: tuple[int, int] = (1, 2)
    colour: Colour = Colour.RED
    blob: bytes = b"\x00"
    table: dict[str, Any] = Field(default_factory=lambda: {"k": [1, 2.5, None]})


class Nested(Observation):
    inner: Inner = Inner()
    inners: list[Inner] = Field(default_factory=lambda: [Inner(x=2)])


class Serialized(Observation):
    n: int = 3

    @field_serializer("n")
    def _n(self, n: int) -> str:
        return f"n={n}"


class WholeSerialized(Observation):
    n: int = 3

    @model_serializer
    def _all(self) -> dict[str, Any]:
        return {"all": self.n}


class Computed(Observation):
    n: int = 3

    @computed_field  # type: ignore[prop-decorator]
    @property
    def twice(self) -> int:
        return 2 * self.n


class Hidden(Observation):
    n: int = 3
    secret: str = Field(default="s", exclude=True)


class Extra(Observation):
    model_config = ConfigDict(extra="allow")
    n: int = 3


class Annotated_(Observation):
    n: Annotated[int, PlainSerializer(lambda v: v * 10)] = 3


class Arrays(Observation):
    model_config = ConfigDict(arbitrary_types_allowed=True)
    frame: Any = np.arange(3, dtype=np.int16)
    scalar: Any = np.float32(1.5)


MODELS = [
    Plain(),
    Plain(text="other", table={"deep": {"deeper": (1, 2)}}, reward=1.0, done=True),
    Nested(),
    Serialized(),
    WholeSerialized(),
    Computed(),
    Hidden(),
    Extra(extra_field=[1, 2]),
    Annotated_(),
    Arrays(),
    Plain.model_construct(text="constructed"),
]


def reference(model: Any, exclude: frozenset[str]) -> Any:
    """The dump through ``model_dump`` alone (what ``dump`` did before reading stored values)."""
    out = wire_value(model.model_dump(exclude=set(exclude)))
    return model.model_dump(mode="json", exclude=set(exclude)) if out is UNSET else out


def same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if type(a) is np.ndarray:
        return bool(a.dtype == b.dtype and np.array_equal(a, b))
    if type(a) is dict:
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if type(a) is list:
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: type(m).__name__)
@pytest.mark.parametrize("exclude", [EXCLUDE, frozenset()], ids=["result", "state"])
def test_a_dump_is_model_dumps(model: Any, exclude: frozenset[str]) -> None:
    assert same(dump(model, exclude), reference(model, exclude))


def test_only_plain_models_are_read_from_their_stored_fields() -> None:
    plain = {Plain, Nested, Arrays}  # (Nested's and Arrays' values then fall back or convert)
    for model in MODELS:
        cls = type(model)
        assert (stored_fields(cls, EXCLUDE) is not None) == (cls in plain), cls.__name__
    fields = stored_fields(Plain, EXCLUDE)
    assert fields is not None and fields[0][:2] == ("reward", "text")
    assert "done" not in fields[0] and fields[1] == len(Plain.model_fields)
