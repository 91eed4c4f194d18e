"""OpenEnv's Pydantic models as section 22 values: a plain model's stored fields read as
they are (fast), anything else through its ``model_dump`` (JSON mode where it must)."""

from __future__ import annotations

import enum
import functools
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["UNSET", "dump", "jsonable", "stored_fields", "wire_value"]


UNSET = object()


#: Values that are section 22 values as they are.
AS_IS = frozenset({type(None), bool, int, float, str, bytes, np.ndarray})


def wire_value(value: Any) -> Any:
    """`value` as section 22 values: tuples as lists, numpy scalars and enums as their
    values; :data:`UNSET` for anything else (then the JSON dump is used)."""
    kind = type(value)
    if kind in AS_IS:
        return value
    if kind is dict:
        return wire_items(value, value)
    if kind is list or kind is tuple:
        items = [v if type(v) in AS_IS else wire_value(v) for v in value]
        return UNSET if any(i is UNSET for i in items) else items
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, enum.Enum):
        return wire_value(value.value)
    return UNSET


def wire_items(values: Mapping[Any, Any], keys: Any) -> Any:
    """``{k: wire_value(values[k]) for k in keys}`` (keys strings), or :data:`UNSET`."""
    out = {}
    for k in keys:
        v = values[k]
        if type(v) not in AS_IS:
            v = wire_value(v)
            if v is UNSET:
                return UNSET
        if type(k) is not str:
            return UNSET
        out[k] = v
    return out


@functools.lru_cache(maxsize=256)
def stored_fields(cls: Any, exclude: frozenset[str]) -> tuple[tuple[str, ...], int] | None:
    """(the fields to dump, how many fields it has) of the Pydantic model class `cls` if its
    ``model_dump`` is its stored field values, in order (no serializer, computed
    field, excluded field or extra field changes what it dumps); None otherwise."""
    from annotated_types import BaseMetadata

    decorators = getattr(cls, "__pydantic_decorators__", None)
    fields = getattr(cls, "model_fields", None)
    if (
        decorators is None
        or type(fields) is not dict
        or decorators.field_serializers
        or decorators.model_serializers
        or getattr(cls, "model_computed_fields", None)
        or cls.model_config.get("extra") == "allow"
        or getattr(cls, "__pydantic_root_model__", False)
    ):
        return None
    for info in fields.values():
        if info.exclude or not all(isinstance(m, BaseMetadata) for m in info.metadata):
            return None
    return tuple(k for k in fields if k not in exclude), len(fields)


def dump(model: Any, exclude: frozenset[str] = frozenset()) -> Any:
    """`model`'s ``model_dump`` as section 22 values (its JSON dump where it holds
    anything else); a plain model's stored values are read as they are."""
    names = stored_fields(model.__class__, exclude)
    if names is not None:
        stored = model.__dict__
        if len(stored) == names[1]:
            out = wire_items(stored, names[0])
            if out is not UNSET:
                return out
    out = wire_value(model.model_dump(exclude=set(exclude)))
    return model.model_dump(mode="json", exclude=set(exclude)) if out is UNSET else out


def jsonable(value: Any) -> Any:

    return json.loads(json.dumps(value, default=str))
