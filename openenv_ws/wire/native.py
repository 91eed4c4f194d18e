"""The step loop's frames through the C speedups (``openenv_ws/_wire.c``) where built.

Each hot frame has two tiers: the reference codec (:mod:`.encode`,
:mod:`.decode`) and C. The C reader and writer work on the canonical layout
of :func:`~.encode.layout`, given to them here when this module is imported,
and decline (None) whatever they do not cover; the reference then takes the
frame. A structured field (a step's map action, a result's map observation:
SPEC section 22) is found by the C readers and read from its bytes alone by
the reference's :func:`~.decode.decode_field`. Both tiers give the same bytes
and the same values (the tests check the C tier against the reference with
odd inputs).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from .._shm import SharedArray
from ..errors import ProtocolError
from .compress import CompressedArray
from .decode import decode_field
from .encode import NIL, array_parts, encode, layout, thread_pack
from .frames import Result, Step
from .limits import MAX_ID

__all__: list[str] = ["STRUCTURED", "encode_result", "encode_step", "native_wire", "parse_step"]


def _configured() -> Any:
    """The C module given this package's layouts, or None (see :data:`native_wire`)."""
    try:
        from .. import _wire  # type: ignore[attr-defined, unused-ignore]
    except ImportError:
        return None
    c: Any = _wire
    try:
        c.configure("result", layout(Result).prefix, layout(Result).keys)
        c.configure("step", layout(Step).prefix, layout(Step).keys)
    except ValueError:
        return None  # a hot frame has fields the C does not know (yet): the reference serves
    return c


#: The C module (``openenv_ws._wire``) given this package's layouts; None where
#: the package was installed without a C compiler, or where ``step`` or
#: ``result`` is declared with other fields than the C readers know.
native_wire: Any = _configured()

#: The obs_ext_type of a structured observation in the C reader's result tuple (the
#: value's MessagePack bytes follow, for :func:`~.decode.decode_field`).
STRUCTURED: int = -1 if native_wire is None else native_wire.STRUCTURED

_STEP_PREFIX = layout(Step).prefix
# The fast path of encode_step writes a step of two fields: action, then obs.
_TWO_FIELDS = len(layout(Step).keys) == 2
_ACTION_KEY, _OBS_KEY = layout(Step).keys[:2]
# The bytes after the id of a step with an action in 0..127: [2 * action + obs].
_STEP_TAILS = tuple(
    _ACTION_KEY + bytes((action,)) + _OBS_KEY + (b"\xc3" if obs else b"\xc2")
    for action in range(128)
    for obs in (False, True)
)
_U8, _U16, _U32 = struct.Struct(">BB"), struct.Struct(">BH"), struct.Struct(">BI")
# Actions packed as they are (structured ones, SPEC section 22).
_PACKED = frozenset({dict, list, str})


def encode_step(rid: int, action: Any, obs: bool = True) -> bytes:
    """``encode(Step(id=rid, action=action, obs=obs))``: a client's step request."""
    if type(rid) is not int or not 0 <= rid <= MAX_ID or (obs is not True and obs is not False):
        return encode(Step(rid, action, obs))  # says what is wrong
    if rid < 0x80:
        head = bytes((rid,))
    elif rid <= 0xFF:
        head = _U8.pack(0xCC, rid)
    elif rid <= 0xFFFF:
        head = _U16.pack(0xCD, rid)
    else:
        head = _U32.pack(0xCE, rid)
    kind = type(action)
    if kind is int and 0 <= action < 128:
        tail: bytes = _STEP_TAILS[2 * action + obs]
        return _STEP_PREFIX + head + tail
    if kind in _PACKED:
        try:
            packed: bytes = thread_pack()(action)
        except (ProtocolError, TypeError, ValueError, OverflowError):
            pass  # the reference encoder says what is wrong
        else:
            return b"".join(
                (_STEP_PREFIX, head, _ACTION_KEY, packed, _OBS_KEY, b"\xc3" if obs else b"\xc2")
            )
    return encode(Step(rid, action, obs))


def _reference_step(rid: int, action: Any, obs: bool = True) -> bytes:
    return encode(Step(rid, action, obs))


if not _TWO_FIELDS:  # a step declared with more fields: the reference writes them all
    encode_step = _reference_step


def encode_result(
    rid: int,
    obs: Any,
    reward: float,
    terminated: bool,
    truncated: bool,
    done: bool,
    info: dict[str, Any],
) -> bytes:
    """``encode(Result(...))`` of these fields: in C where built for an observation
    that is an array (inline or in the shared region), a structured value (packed
    first by the reference's packer) or none, a float reward, and an info of
    scalars; by the reference encoder otherwise (same bytes).
    """
    if native_wire is not None:
        kind = type(obs)
        try:
            head, data = (
                (NIL, b"")
                if obs is None
                else array_parts(obs)
                if kind is np.ndarray or kind is SharedArray or kind is CompressedArray
                else (thread_pack()(obs), b"")
                if kind is dict or kind is list or kind is str
                else (b"", b"")
            )
        except (ProtocolError, TypeError, ValueError, OverflowError):
            head = b""  # the reference encoder says what is wrong
        if head:
            out: bytes | None = native_wire.pack_result(
                rid, head, data, reward, terminated, truncated, done, info
            )
            if out is not None:
                return out
    return encode(Result(rid, obs, reward, terminated, truncated, done, info))


def _no_reader(data: bytes) -> None:
    return None


def _read_step(data: bytes) -> tuple[int, Any, bool] | None:
    got: tuple[int, Any, bool] | None = native_wire.parse_step(data)
    if got is None or type(got[1]) is int:
        return got
    rid = got[0]
    try:
        return rid, decode_field(got[1], Step, "action", rid), got[2]
    except ProtocolError:
        return None  # the reference decoder reads the frame and says what is wrong


#: ``(id, action, obs)`` of a step request in the canonical layout, read in C (an
#: action other than 0..127 from its bytes by :func:`~.decode.decode_field`); None
#: for any other bytes, an action the reference refuses, and every frame where C is
#: not built: :func:`~.decode.decode_client_frame` reads those.
parse_step: Callable[[bytes], tuple[int, Any, bool] | None] = (
    _no_reader if native_wire is None else _read_step
)
