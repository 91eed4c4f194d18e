"""Property tests: every valid frame round-trips; no input escapes as another exception."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from openenv_ws import protocol
from openenv_ws._arrays import DTYPE_CODES, MAX_NDIM, array_ext_parts, decode_array
from openenv_ws.errors import ProtocolError

from .conftest import PROFILE
from .vectorlib import assert_same

DTYPES = [np.dtype(name) for name in DTYPE_CODES]
U32 = 2**32 - 1

texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)
ids = st.integers(0, U32)


@st.composite
def arrays(draw: st.DrawFn, max_dims: int = 4) -> np.ndarray[Any, Any]:
    """Arrays of every allowed dtype, incl. 0-d, zero-size, big-endian and strided ones."""
    dtype = draw(st.sampled_from(DTYPES))
    if draw(st.booleans()):
        dtype = dtype.newbyteorder(">")
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=max_dims, min_side=0, max_side=5))
    arr = draw(hnp.arrays(dtype, shape))
    layout = draw(st.sampled_from(["c", "fortran", "strided", "reversed"]))
    if layout == "fortran":
        arr = np.asfortranarray(arr)
    elif layout == "strided" and arr.ndim:
        arr = np.repeat(arr, 2, axis=0)[::2]
    elif layout == "reversed" and arr.ndim:
        arr = arr[::-1]
    return arr


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    texts,
    st.binary(max_size=20),
    arrays(max_dims=2),
)


def plain(levels: int) -> st.SearchStrategy[Any]:
    """Free-form values holding at most `levels` levels of lists/maps."""
    if levels == 0:
        return scalars
    inner = plain(levels - 1)
    return st.one_of(
        scalars,
        st.lists(inner, max_size=3),
        st.dictionaries(texts, inner, max_size=3),
    )


def maps(levels: int = 8) -> st.SearchStrategy[dict[str, Any]]:
    """A free-form map (level 1) with up to `levels` levels in all."""
    return st.dictionaries(texts, plain(min(levels - 1, 3)), max_size=4)


actions = st.one_of(
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False),
    arrays(),
    st.lists(plain(2), max_size=3),
    maps(),
)
opt_text = st.none() | texts
rewards = st.floats(allow_nan=False) | st.integers(-(2**53), 2**53)

client_frames = st.one_of(
    st.builds(protocol.Open, id=ids, version=ids, config=maps(), token=opt_text, resume=opt_text),
    st.builds(
        protocol.Reset,
        id=ids,
        seed=st.none() | st.integers(0, 2**64 - 1),
        episode_id=opt_text,
        options=maps(),
    ),
    st.builds(protocol.Step, id=ids, action=actions, obs=st.booleans()),
    st.builds(protocol.GetState, id=ids),
    st.builds(protocol.Snapshot, id=ids),
    st.builds(protocol.Restore, id=ids, snapshot=st.binary(max_size=64)),
    st.builds(protocol.Close, id=ids),
)
server_frames = st.one_of(
    st.builds(
        protocol.Opened, id=ids, session_id=texts, version=ids, spec=maps(), resume_token=opt_text
    ),
    st.builds(
        protocol.Result,
        id=ids,
        obs=st.none() | arrays(),
        reward=rewards,
        terminated=st.booleans(),
        truncated=st.booleans(),
        done=st.booleans(),
        info=maps(),
    ),
    st.builds(protocol.StateReply, id=ids, state=maps()),
    st.builds(protocol.SnapshotData, id=ids, snapshot=st.binary(max_size=64)),
    st.builds(protocol.Closed, id=ids),
    st.builds(
        protocol.Error,
        id=st.none() | ids,
        code=st.sampled_from(sorted(protocol.ERRORS)),
        message=texts,
        fatal=st.booleans(),
    ),
)


def _expected(frame: Any) -> Any:
    """What decoding must give back: ints in float fields become floats."""
    if isinstance(frame, protocol.Result):
        frame = protocol.Result(
            frame.id,
            frame.obs,
            float(frame.reward),
            frame.terminated,
            frame.truncated,
            frame.done,
            frame.info,
        )
    return frame


@PROFILE
@given(client_frames)
def test_client_frames_round_trip(frame: Any) -> None:
    data = protocol.encode(frame)
    decoded = protocol.decode_client_frame(data, max_frame_size=len(data))
    assert_same(decoded, frame)
    assert protocol.encode(decoded) == data


@PROFILE
@given(server_frames)
def test_server_frames_round_trip(frame: Any) -> None:
    data = protocol.encode(frame)
    decoded = protocol.decode_server_frame(data, max_frame_size=len(data))
    assert_same(decoded, _expected(frame))
    assert protocol.encode(decoded) == data


@PROFILE
@given(arrays(max_dims=MAX_NDIM))
def test_arrays_encode_as_little_endian_c_order(arr: np.ndarray[Any, Any]) -> None:
    head, body = array_ext_parts(arr)
    canonical = np.asarray(arr, dtype=arr.dtype.newbyteorder("<"), order="C")
    assert bytes(body) == canonical.tobytes()
    payload = (head + bytes(body))[len(head) - 2 - 4 * arr.ndim :]
    assert payload[0] == DTYPE_CODES[arr.dtype.name] and payload[1] == arr.ndim
    got = decode_array(payload)
    assert got.shape == arr.shape and got.dtype == canonical.dtype
    assert got.tobytes() == canonical.tobytes()
    # The same values in any layout or byte order give the same bytes.
    same_head, same_body = array_ext_parts(canonical.copy())
    assert (same_head, bytes(same_body)) == (head, bytes(body))


def _decode_any(data: bytes, direction: str) -> None:
    decode = protocol.decode_client_frame if direction == "client" else protocol.decode_server_frame
    try:
        frame = decode(data)
    except ProtocolError as err:
        assert str(err), "a refusal must say what is wrong"
        assert err.code in protocol.ERRORS
        return
    assert frame.OP, "decoders return typed frames"


@PROFILE
@given(st.binary(max_size=256), st.sampled_from(["client", "server"]))
def test_random_bytes_raise_only_protocol_errors(data: bytes, direction: str) -> None:
    _decode_any(data, direction)


@PROFILE
@given(st.one_of(client_frames, server_frames), st.data())
def test_damaged_frames_raise_only_protocol_errors(frame: Any, data: st.DataObject) -> None:
    wire = bytearray(protocol.encode(frame))
    how = data.draw(st.sampled_from(["truncate", "flip", "insert"]))
    if how == "truncate":
        del wire[data.draw(st.integers(0, len(wire) - 1)) :]
    elif how == "flip":
        i = data.draw(st.integers(0, len(wire) - 1))
        wire[i] ^= data.draw(st.integers(1, 255))
    else:
        i = data.draw(st.integers(0, len(wire)))
        wire[i:i] = data.draw(st.binary(min_size=1, max_size=4))
    direction = "client" if isinstance(frame, protocol.ClientFrame) else "server"
    _decode_any(bytes(wire), direction)


def damaged(data: bytes, draw: st.DataObject) -> bytes:
    """`data`, or `data` with one byte changed or cut short there, as `draw` decides."""
    out = bytearray(data)
    if out and draw.draw(st.booleans()):
        at = draw.draw(st.integers(0, len(out) - 1))
        if draw.draw(st.booleans()):
            out[at] = draw.draw(st.integers(0, 255))
        else:
            del out[at:]
    return bytes(out)


def _outcome(make: Any) -> Any:
    try:
        return make()
    except ProtocolError as exc:
        return ("error", str(exc))


@PROFILE
@given(
    st.integers(-1, 2**32) | ids,
    st.integers(-(2**64), 2**64)
    | st.booleans()
    | st.floats()
    | maps()
    | st.text(max_size=5)
    | st.just("\ud800")
    | st.lists(st.integers(-(2**65), 2**65) | st.text(max_size=3), max_size=3),
    st.booleans() | st.integers(0, 1),
)
def test_encode_step_is_encode_of_a_step(rid: Any, action: Any, obs: Any) -> None:
    """The step loop's encoder gives encode()'s bytes, or encode()'s error."""
    fast = _outcome(lambda: protocol.encode_step(rid, action, obs))
    slow = _outcome(lambda: protocol.encode(protocol.Step(id=rid, action=action, obs=obs)))
    assert fast == slow


@PROFILE
@given(
    st.integers(-1, 2**32) | ids,
    st.none() | arrays() | st.integers(0, 3),
    rewards | st.just(float("nan")) | st.integers(-5, 5),
    st.booleans() | st.integers(0, 1),
    st.booleans(),
    st.booleans(),
    maps() | st.lists(st.integers(), max_size=2),
)
def test_encode_result_is_encode_of_a_result(
    rid: Any, obs: Any, reward: Any, terminated: Any, truncated: bool, done: bool, info: Any
) -> None:
    fast = _outcome(
        lambda: protocol.encode_result(rid, obs, reward, terminated, truncated, done, info)
    )
    slow = _outcome(
        lambda: protocol.encode(
            protocol.Result(rid, obs, reward, terminated, truncated, done, info)
        )
    )
    assert fast == slow
