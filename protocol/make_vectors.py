"""Generate the golden vectors of protocol v1 in ``protocol/vectors/``.

    python protocol/make_vectors.py            # (re)write the files
    python protocol/make_vectors.py --check    # exit 1 if the files differ

The output is deterministic: the same code writes the same bytes. The format
of ``vectors.json`` is described in its own ``format`` entry and in
``protocol/SPEC.md`` (section "Golden vectors").
"""

from __future__ import annotations

import argparse
import base64
import functools
import json
import math
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

from openenv_ws.environment import EnvSpec
from openenv_ws.protocol import (
    ERRORS,
    PROTOCOL_VERSION,
    Batch,
    Close,
    Closed,
    GetState,
    Open,
    Opened,
    Reset,
    Restore,
    Result,
    Send,
    Snapshot,
    SnapshotData,
    StateReply,
    Step,
    encode,
    error_frame,
    frame_fields,
)
from openenv_ws.spaces import (
    ArraySpec,
    DictSpec,
    DiscreteSpec,
    JsonSpec,
    MultiBinarySpec,
    MultiDiscreteSpec,
    TextSpec,
    TupleSpec,
)

VECTORS_DIR = Path(__file__).resolve().parent / "vectors"
FULL_FRAME_FILE = "result_rgb_210x160x3.msgpack"

FORMAT = (
    "Each entry of 'frames' is a valid frame in canonical encoding: 'frame' describes its "
    "decoded value (op, id, then every field in wire order) and 'hex' holds its exact bytes "
    "(or 'file' names a file beside this one holding them). Encoding 'frame' must give "
    "exactly these bytes; decoding them must give 'frame'. 'decode_only' entries are valid "
    "frames in a non-canonical encoding: decoding gives 'frame' (absent optional fields take "
    "their defaults). 'arrays' entries give one MessagePack ext type 1 value alone. "
    "'compressed' entries are the ext type 3 values (hex, header included) a server sends "
    "in one session that negotiated 'codec' (and 'delta'), in order; decoding each with a "
    "limit of 'max_bytes' gives 'value'. 'compressed_malformed' entries: after decoding the "
    "'before' values of such a session, decoding 'hex' is refused with a message holding "
    "'error'. "
    "'malformed' entries must be refused with 'code' (and the request id 'id' when it is "
    "readable), by a receiver in 'direction' (client: a server decoding a client frame; "
    "server: a client decoding a server frame) whose size limit is 'max_frame_size'; for "
    "bad_frame 'id' is null (a receiver may still echo the id if it could read it). A "
    "malformed entry holds 'hex', or 'hex_runs': [[hex, count], ...], the bytes being each "
    "hex repeated count times, concatenated. "
    "Value notation: JSON null/true/false/strings and integers stand for themselves; "
    '{"$float": x} is a float64 (x a number, or "nan", "inf", "-inf"); {"$bin": hex} is '
    'MessagePack bin; {"$array": {"dtype", "shape", "hex" | "base64" | "file_data"}} is an '
    "ndarray whose element bytes are little-endian C order ('file_data': {'offset', "
    "'length'} of those bytes inside the entry's 'file'); JSON arrays and objects are "
    "MessagePack arrays and maps (object keys in order)."
)


# --------------------------------------------------------------------------- notation


def describe(value: Any, *, data_ref: dict[str, int] | None = None) -> Any:
    """The JSON notation of a decoded value (see FORMAT)."""
    if value is None or type(value) in (bool, int, str):
        return value
    if type(value) is float:
        if math.isnan(value):
            return {"$float": "nan"}
        if math.isinf(value):
            return {"$float": "inf" if value > 0 else "-inf"}
        return {"$float": value}
    if type(value) is bytes:
        return {"$bin": value.hex()}
    if isinstance(value, np.ndarray):
        body: dict[str, Any] = {"dtype": value.dtype.name, "shape": list(value.shape)}
        raw = np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<")).tobytes()
        if data_ref is not None:
            body["file_data"] = data_ref
        elif len(raw) > 64:
            body["base64"] = base64.b64encode(raw).decode("ascii")
        else:
            body["hex"] = raw.hex()
        return {"$array": body}
    if type(value) is list:
        return [describe(v) for v in value]
    if type(value) is dict:
        return {k: describe(v) for k, v in value.items()}
    raise TypeError(f"no notation for {type(value).__name__}")


# --------------------------------------------------------------------------- values

RNG_SEED = 20240601


# A made-up palette: colour code i is (i, 255 - i, i * 7 % 256).
_PALETTE = bytes(b for i in range(256) for b in (i, 255 - i, i * 7 % 256))


def _pattern(shape: tuple[int, ...], dtype: str, salt: int = 0) -> np.ndarray[Any, Any]:
    """A deterministic, non-trivial array (no RNG state shared with anything else)."""
    rng = np.random.default_rng(RNG_SEED + salt)
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.startswith("float"):
        return (rng.standard_normal(size=shape) * 10).round(3).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)


def _rgb(height: int, width: int) -> np.ndarray[Any, Any]:
    """A synthetic Atari-like frame: flat background, bands and a few sprites."""
    frame = np.zeros((height, width, 3), dtype=np.uint8)
    frame[:, :] = (144, 72, 17)
    frame[: height // 6, :] = (236, 236, 236)
    frame[height - height // 8 :, :] = (92, 186, 92)
    ys, xs = np.mgrid[0:height, 0:width]
    ball = (ys - height // 2) ** 2 + (xs - width // 3) ** 2 <= max(1, height // 40) ** 2
    frame[ball] = (236, 236, 236)
    frame[height // 3 : height // 3 + max(1, height // 12), width - 4 : width - 2] = (92, 186, 92)
    return frame


ARRAYS: list[tuple[str, str, np.ndarray[Any, Any]]] = [
    ("uint8_rgb_12x8x3", "small RGB frame, uint8, shape [12, 8, 3]", _rgb(12, 8)),
    (
        "uint8_grayscale_21x16",
        "grayscale frame, uint8, shape [21, 16]",
        _pattern((21, 16), "uint8"),
    ),
    ("uint8_ram_128", "Atari RAM, 128 uint8", _pattern((128,), "uint8", 1)),
    ("float32_vec", "float32 vector of 5", _pattern((5,), "float32", 2)),
    ("float64_2x2", "float64 2x2", _pattern((2, 2), "float64", 3)),
    ("float16_3", "float16 vector of 3", _pattern((3,), "float16", 4)),
    ("bool_2x3", "bool 2x3 (bytes 0/1)", _pattern((2, 3), "bool", 5)),
    ("int8_4", "int8 vector of 4", np.array([-128, -1, 0, 127], dtype=np.int8)),
    ("uint16_3", "uint16 vector of 3", np.array([0, 258, 65535], dtype=np.uint16)),
    ("int16_3", "int16 vector of 3", np.array([-32768, -2, 32767], dtype=np.int16)),
    ("uint32_2", "uint32 vector of 2", np.array([1, 4294967295], dtype=np.uint32)),
    ("int32_2", "int32 vector of 2", np.array([-2147483648, 2147483647], dtype=np.int32)),
    ("uint64_2", "uint64 vector of 2", np.array([1, 2**64 - 1], dtype=np.uint64)),
    ("int64_2", "int64 vector of 2", np.array([-(2**63), 2**63 - 1], dtype=np.int64)),
    (
        "zero_size_0x3",
        "zero-size float32, shape [0, 3] (no data bytes)",
        np.zeros((0, 3), np.float32),
    ),
    ("zero_size_1d", "zero-size uint8, shape [0]", np.zeros((0,), np.uint8)),
    ("scalar_0d_int64", "0-d int64 (a scalar; shape [])", np.array(-7, dtype=np.int64)),
    ("scalar_0d_float32", "0-d float32 (shape [])", np.array(0.5, dtype=np.float32)),
    ("scalar_0d_bool", "0-d bool (shape [])", np.array(True)),
    ("uint8_16_fixext", "16 payload bytes: encoded as fixext 16", np.arange(10, dtype=np.uint8)),
]


def _frames() -> Iterator[tuple[str, str, str, Any]]:
    """(name, direction, description, frame) of every canonical frame vector."""
    atari_config = {
        "game": "pong",
        "obs_type": "rgb",
        "frameskip": 4,
        "repeat_action_probability": 0.25,
        "full_action_space": False,
        "max_episode_steps": 1000,
    }
    yield "open_minimal", "client", "open with the default (empty) config", Open(id=1)
    yield (
        "open_atari",
        "client",
        "open an Atari session with a token",
        Open(id=1, config=atari_config, token="s3cret"),
    )
    yield (
        "open_resume",
        "client",
        "open that resumes an earlier session",
        Open(id=1, resume="r-7f3a"),
    )
    yield (
        "open_v2",
        "client",
        "open asking for a version the server may not speak",
        Open(id=1, version=2),
    )
    yield (
        "open_palette",
        "client",
        "open asking for indexed colour frames",
        Open(id=1, config={"game": "pong"}, palette=True),
    )
    yield "reset_plain", "client", "reset without a seed", Reset(id=2)
    yield (
        "reset_seeded",
        "client",
        "reset with seed, episode id and options",
        Reset(id=2, seed=42, episode_id="ep-1", options={"noop_max": 30}),
    )
    yield (
        "reset_big_seed",
        "client",
        "reset with a seed needing uint64",
        Reset(id=3, seed=2**64 - 1),
    )
    yield "step_int", "client", "step with a discrete action", Step(id=3, action=2)
    yield (
        "step_no_obs",
        "client",
        "step that leaves the observation out",
        Step(id=4, action=0, obs=False),
    )
    yield "step_id_uint16", "client", "step whose id needs uint16", Step(id=300, action=1)
    yield "step_id_max", "client", "step with the largest id, 2**32-1", Step(id=2**32 - 1, action=5)
    yield "step_float", "client", "step with a float action", Step(id=5, action=-0.75)
    yield (
        "step_array",
        "client",
        "step with a float32 array action",
        Step(id=6, action=_pattern((3,), "float32", 6)),
    )
    yield (
        "step_map",
        "client",
        "step with a map action",
        Step(id=7, action={"move": 1, "fire": True, "text": "go"}),
    )
    yield "state", "client", "ask for the episode state", GetState(id=8)
    yield "snapshot", "client", "ask for a snapshot", Snapshot(id=9)
    yield "restore", "client", "restore a snapshot", Restore(id=10, snapshot=b"\x00\x01snap\xff")
    yield "close", "client", "end the session", Close(id=11)

    spec = {
        "action": {
            "type": "discrete",
            "n": 6,
            "meanings": ["NOOP", "FIRE", "RIGHT", "LEFT", "RIGHTFIRE", "LEFTFIRE"],
        },
        "observation": {
            "type": "array",
            "shape": [210, 160, 3],
            "dtype": "uint8",
            "low": 0,
            "high": 255,
        },
        "env": "atari",
        "config": {**atari_config, "mode": None, "difficulty": None},
    }
    yield (
        "opened_atari",
        "server",
        "opened: session id, version, spec",
        Opened(id=1, session_id="9f1c2e", version=PROTOCOL_VERSION, spec=spec),
    )
    yield (
        "opened_resumable",
        "server",
        "opened with a resume token",
        Opened(
            id=1,
            session_id="9f1c2e",
            spec={"action": {"type": "discrete", "n": 2}},
            resume_token="r-7f3a",
        ),
    )
    yield (
        "opened_palette",
        "server",
        "opened with a palette: observations come as colour codes",
        Opened(id=1, session_id="9f1c2e", spec=spec, palette=_PALETTE),
    )
    yield (
        "open_compress",
        "client",
        "open offering zstd and lz4 compression with delta frames (section 19)",
        Open(id=1, config={"game": "pong"}, palette=True, compress=["zstd", "lz4"], delta=True),
    )
    yield (
        "opened_compress",
        "server",
        "opened choosing zstd with delta frames",
        Opened(id=1, session_id="9f1c2e", spec=spec, palette=_PALETTE, compress="zstd", delta=True),
    )
    yield (
        "result_indexed",
        "server",
        "result in a session with a palette: 12x8 colour codes for a [12, 8, 3] RGB frame",
        Result(id=3, obs=(np.arange(96, dtype=np.uint8) * 2).reshape(12, 8)),
    )
    yield (
        "result_rgb_small",
        "server",
        "result of reset: small RGB observation",
        Result(
            id=2, obs=_rgb(12, 8), info={"lives": 5, "episode_frame_number": 0, "frame_number": 0}
        ),
    )
    yield (
        "result_grayscale",
        "server",
        "result with a grayscale observation",
        Result(id=3, obs=_pattern((21, 16), "uint8"), reward=1.0),
    )
    yield (
        "result_ram",
        "server",
        "result with a RAM observation (128 bytes)",
        Result(id=3, obs=_pattern((128,), "uint8", 1), reward=-1.0, terminated=True, done=True),
    )
    yield (
        "result_no_obs",
        "server",
        "result of a step sent with obs=false",
        Result(id=4, obs=None, reward=0.5, truncated=True, done=True, info={"lives": 0}),
    )
    yield (
        "result_info_array",
        "server",
        "result whose info holds a nested array",
        Result(id=5, obs=np.zeros((2, 2), np.float32), info={"legal": np.array([True, False])}),
    )
    yield (
        "state_reply",
        "server",
        "the episode state",
        StateReply(
            id=8, state={"episode_id": "ep-1", "step_count": 17, "config": {"game": "pong"}}
        ),
    )
    yield (
        "snapshot_data",
        "server",
        "an opaque snapshot",
        SnapshotData(id=9, snapshot=b"\x00\x01snap\xff"),
    )
    yield "closed", "server", "the session is closed", Closed(id=11)
    yield from _vector_frames(atari_config)
    yield from _structured_frames()
    unsolicited = {"bad_frame", "text_frame", "too_big", "idle_timeout", "shutting_down"}
    for code, info in ERRORS.items():
        rid = None if code in unsolicited else 7
        yield (
            f"error_{code}",
            "server",
            f"error {code}: {info.meaning}",
            error_frame(rid, code, _ERROR_MESSAGES[code]),
        )


def _vector_frames(atari_config: dict[str, Any]) -> Iterator[tuple[str, str, str, Any]]:
    """The frames of vector sessions (section 21)."""
    yield (
        "open_vector",
        "client",
        "open a synchronous vector session of 4 Atari envs",
        Open(id=1, config={**atari_config, "max_episode_steps": None}, num_envs=4),
    )
    yield (
        "open_vector_async",
        "client",
        "open an asynchronous vector session: 8 envs, batches of 2, shared memory offered",
        Open(id=1, config={"game": "pong", "num_threads": 2}, num_envs=8, batch_size=2),
    )
    yield (
        "step_vector",
        "client",
        "step all envs of a synchronous vector session: one int64 action per env",
        Step(id=3, action=np.array([0, 1, 2, 3], np.int64)),
    )
    yield (
        "send",
        "client",
        "send actions to the envs of the previous batch, named in another order",
        Send(id=4, action=np.array([3, 1], np.uint8), env_ids=np.array([5, 2], np.int32)),
    )
    yield (
        "send_list",
        "client",
        "send actions as a list, in the previous batch's row order, observations left out",
        Send(id=5, action=[2, 0], obs=False),
    )
    yield (
        "send_box",
        "client",
        "send continuous actions: a float32 row of the action space's shape [1] per env",
        Send(id=6, action=np.array([[0.5], [-1.25]], np.float32)),
    )
    rows = 2
    yield (
        "batch",
        "server",
        "a batch of 2 rows: 4x3 grayscale observations, rewards, flags, env ids, info",
        Batch(
            id=4,
            obs=_pattern((rows, 4, 3), "uint8", 21),
            reward=np.array([0.0, -1.0]),
            terminated=np.array([False, True]),
            truncated=np.array([False, False]),
            env_id=np.array([5, 2], np.int32),
            info={
                "lives": np.array([3, 0], np.int32),
                "frame_number": np.array([1200, 4404], np.int64),
                "episode_frame_number": np.array([400, 4404], np.int64),
            },
        ),
    )
    yield (
        "batch_no_obs",
        "server",
        "a batch of a send with obs=false",
        Batch(
            id=5,
            obs=None,
            reward=np.array([1.0, 0.0]),
            terminated=np.array([False, False]),
            truncated=np.array([False, True]),
            env_id=np.array([2, 5], np.int32),
            info={},
        ),
    )


def _structured_frames() -> Iterator[tuple[str, str, str, Any]]:
    """The frames of sessions with structured spaces and values (section 22)."""
    yield (
        "open_structured",
        "client",
        "open by a client that reads structured values: a Gymnasium id",
        Open(id=1, config={"id": "Blackjack-v1"}, structured=True),
    )
    blackjack = EnvSpec(
        action=DiscreteSpec(2),
        observation=TupleSpec((DiscreteSpec(32), DiscreteSpec(11), DiscreteSpec(2))),
        extra={"env": "gymnasium", "config": {"id": "Blackjack-v1", "kwargs": {}}},
    )
    yield (
        "opened_tuple",
        "server",
        "opened: a Tuple observation of three Discrete spaces (Blackjack)",
        Opened(id=1, session_id="s-1", spec=blackjack.to_wire()),
    )
    goal = EnvSpec(
        action=ArraySpec((4,), "float32", -1.0, 1.0),
        observation=DictSpec(
            (
                ("achieved_goal", ArraySpec((3,), "float64")),
                ("desired_goal", ArraySpec((3,), "float64")),
                (
                    "observation",
                    ArraySpec(
                        (2,),
                        "float32",
                        np.array([-1.0, 0.0], np.float32),
                        np.array([1.0, 5.0], np.float32),
                    ),
                ),
            )
        ),
    )
    yield (
        "opened_dict",
        "server",
        "opened: a Dict observation (goal-conditioned), per-element bounds, a Box action",
        Opened(id=1, session_id="s-2", spec=goal.to_wire()),
    )
    every = EnvSpec(
        action=DiscreteSpec(3, ("left", "stay", "right"), start=-1),
        observation=TupleSpec(
            (
                MultiDiscreteSpec(np.array([3, 4], np.int64), np.array([0, -2], np.int64)),
                MultiBinarySpec((2, 2)),
                TextSpec(8, 1, "abc"),
            )
        ),
    )
    yield (
        "opened_spaces",
        "server",
        "opened: MultiDiscrete with start, MultiBinary, Text observations; Discrete from -1",
        Opened(id=1, session_id="s-3", spec=every.to_wire()),
    )
    nested = EnvSpec(
        action=DiscreteSpec(2),
        observation=DictSpec(
            (("a", TupleSpec((DictSpec((("b", TupleSpec((DiscreteSpec(2),))),)),))),)
        ),
    )
    yield (
        "opened_nested",
        "server",
        "opened: a Dict in a Tuple in a Dict in a Tuple: the spec nests 11 levels (32 allowed)",
        Opened(id=1, session_id="s-5", spec=nested.to_wire()),
    )
    echo = EnvSpec(
        action=JsonSpec(
            {
                "properties": {"message": {"title": "Message", "type": "string"}},
                "required": ["message"],
                "title": "EchoAction",
                "type": "object",
            },
            "EchoAction",
        ),
        observation=JsonSpec(
            {
                "properties": {
                    "echoed_message": {"type": "string"},
                    "message_length": {"type": "integer"},
                },
                "title": "EchoObservation",
                "type": "object",
            },
            "EchoObservation",
        ),
        extra={"env": "openenv"},
    )
    yield (
        "opened_json",
        "server",
        "opened: actions and observations described by JSON Schemas (typed models)",
        Opened(id=1, session_id="s-4", spec=echo.to_wire()),
    )
    yield (
        "result_tuple",
        "server",
        "result: a Tuple observation is a list",
        Result(id=3, obs=[14, 6, 0], reward=-1.0, terminated=True, done=True),
    )
    yield (
        "result_dict",
        "server",
        "result: a Dict observation is a map of arrays",
        Result(
            id=3,
            obs={
                "achieved_goal": np.array([1.25, 0.5, 0.75]),
                "desired_goal": np.array([1.5, 0.25, 0.5]),
                "observation": np.array([0.5, 2.0], np.float32),
            },
            reward=-1.0,
            info={"is_success": 0.0},
        ),
    )
    yield (
        "result_spaces",
        "server",
        "result: MultiDiscrete and MultiBinary arrays and a Text string in a list",
        Result(
            id=3,
            obs=[np.array([2, -1], np.int64), np.array([[0, 1], [1, 0]], np.int8), "cab"],
            reward=0.5,
        ),
    )
    yield (
        "result_json",
        "server",
        "result: a typed model's fields as a map",
        Result(id=3, obs={"echoed_message": "hi", "message_length": 2}, reward=0.2),
    )
    yield (
        "result_bytes",
        "server",
        "result: an observation of binary data",
        Result(id=3, obs=b"\x00\x01"),
    )
    yield ("step_text", "client", "step with a Text action: a string", Step(id=3, action="ab"))
    yield (
        "step_tuple",
        "client",
        "step with a Tuple action: a list of an integer and an array",
        Step(id=3, action=[1, np.array([0.5], np.float32)]),
    )
    yield (
        "step_json",
        "client",
        "step with a typed model's fields as a map",
        Step(id=3, action={"message": "hi"}),
    )


_ERROR_MESSAGES = {
    "bad_frame": "frame cannot be decoded: it is truncated (the MessagePack data ends early)",
    "text_frame": "text messages are not protocol v1 frames; send binary MessagePack frames",
    "too_big": "frame of 2000000 bytes is above the limit of 1048576 bytes",
    "unsupported_version": "protocol version 2 is not supported; this server speaks 1",
    "auth": "missing or wrong bearer token",
    "capacity": "the server hosts its maximum of 64 sessions; retry later",
    "idle_timeout": "no request for 300 s; the session is closed",
    "shutting_down": "the server is shutting down",
    "resume_failed": "resume token 'r-7f3a' is unknown or expired",
    "internal": "the environment failed on 'step' (RuntimeError: boom)",
    "step_timeout": "the environment did not answer within the server's deadline of 60 s per call",
    "bad_request": "field 'action' must be an integer, a number, an array, a list or a map, got str",
    "unknown_op": "op 'jump' is unknown",
    "not_open": "'step' is not allowed while the session is connected: send 'open' first",
    "already_open": "'open' is not allowed while the session is open",
    "bad_config": "unknown atari option(s) gmae; known: game, obs_type",
    "not_reset": "'step' is not allowed while the session is open: call reset() first",
    "episode_over": "the episode has ended; call reset() to start a new one",
    "invalid_action": "action 9 is outside the action space (0..5)",
    "unsupported": "FakeEnvironment does not support snapshots",
    "bad_snapshot": "snapshot is not an Atari snapshot of this server; take one with snapshot()",
}


def _p(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def _map(*pairs: bytes) -> bytes:
    """A map of already-packed keys and values (an even number of parts)."""
    assert len(pairs) % 2 == 0
    return bytes([0x80 | len(pairs) // 2]) + b"".join(pairs)


def _ext(code: int, payload: bytes) -> bytes:
    return struct.pack(">BIb", 0xC9, len(payload), code) + payload


def _array_payload(code: int, shape: list[int], data: bytes) -> bytes:
    return struct.pack(f"<BB{len(shape)}I", code, len(shape), *shape) + data


def _step(action: bytes) -> bytes:
    return _map(_p("op"), _p("step"), _p("id"), _p(7), _p("action"), action, _p("obs"), _p(True))


def _deep(levels: int) -> bytes:
    """`levels` arrays nested in one another, the innermost empty."""
    return b"\x91" * (levels - 1) + b"\x90"


def _config_open(value: bytes, rid: int = 7) -> bytes:
    return _map(_p("op"), _p("open"), _p("id"), _p(rid), _p("version"), _p(1), _p("config"), value)


def _decode_only() -> Iterator[tuple[str, str, str, bytes, Any]]:
    """(name, direction, description, bytes, frame): valid but non-canonical encodings."""
    config = functools.partial(_config_open, rid=1)
    yield (
        "step_fields_reordered",
        "client",
        "fields in another order",
        _map(_p("action"), _p(2), _p("id"), _p(3), _p("obs"), _p(True), _p("op"), _p("step")),
        Step(id=3, action=2),
    )
    yield (
        "step_defaults",
        "client",
        "optional field obs absent (default true)",
        _map(_p("op"), _p("step"), _p("id"), _p(3), _p("action"), _p(2)),
        Step(id=3, action=2),
    )
    yield (
        "step_id_wide",
        "client",
        "id 3 written as uint32 (0xce)",
        _map(_p("op"), _p("step"), _p("id"), b"\xce\x00\x00\x00\x03", _p("action"), _p(2)),
        Step(id=3, action=2),
    )
    yield (
        "step_unknown_field",
        "client",
        "an unknown field is ignored",
        _map(
            _p("op"),
            _p("step"),
            _p("id"),
            _p(3),
            _p("action"),
            _p(2),
            _p("x-trace"),
            _p({"a": [1]}),
        ),
        Step(id=3, action=2),
    )
    yield (
        "step_str8_op",
        "client",
        "op written as str8 (0xd9) instead of fixstr",
        _map(b"\xd9\x02op", b"\xd9\x04step", _p("id"), _p(3), _p("action"), _p(2)),
        Step(id=3, action=2),
    )
    yield (
        "open_only_version",
        "client",
        "open with only version; config nil",
        _map(_p("op"), _p("open"), _p("id"), _p(1), _p("version"), _p(1), _p("config"), _p(None)),
        Open(id=1),
    )
    yield (
        "reset_minimal",
        "client",
        "reset with no optional field",
        _map(_p("op"), _p("reset"), _p("id"), _p(2)),
        Reset(id=2),
    )
    yield (
        "result_int_reward",
        "server",
        "reward written as an integer",
        _map(
            _p("op"),
            _p("result"),
            _p("id"),
            _p(4),
            _p("reward"),
            _p(1),
            _p("terminated"),
            _p(False),
            _p("truncated"),
            _p(False),
            _p("done"),
            _p(False),
        ),
        Result(id=4, reward=1.0),
    )
    yield (
        "result_float32_reward",
        "server",
        "reward written as float32 (0xca)",
        _map(
            _p("op"),
            _p("result"),
            _p("id"),
            _p(4),
            _p("reward"),
            struct.pack(">Bf", 0xCA, 0.5),
            _p("terminated"),
            _p(False),
            _p("truncated"),
            _p(False),
            _p("done"),
            _p(False),
        ),
        Result(id=4, reward=0.5),
    )
    yield (
        "result_array_ext32",
        "server",
        "obs in an ext 32 (0xc9) instead of fixext 16",
        _map(
            _p("op"),
            _p("result"),
            _p("id"),
            _p(4),
            _p("obs"),
            _ext(1, _array_payload(1, [10], bytes(range(10)))),
            _p("reward"),
            _p(0.0),
            _p("terminated"),
            _p(False),
            _p("truncated"),
            _p(False),
            _p("done"),
            _p(False),
            _p("info"),
            _p({}),
        ),
        Result(id=4, obs=np.arange(10, dtype=np.uint8)),
    )
    yield (
        "open_config_depth_8",
        "client",
        "config nesting exactly 8 levels (the limit)",
        config(b"\x81\xa1k" + _deep(7)),
        Open(id=1, config={"k": [[[[[[[]]]]]]]}),
    )
    yield (
        "error_nil_id",
        "server",
        "error frame with id nil, fields in reverse order",
        _map(
            _p("fatal"),
            _p(True),
            _p("message"),
            _p("m"),
            _p("code"),
            _p("bad_frame"),
            _p("id"),
            _p(None),
            _p("op"),
            _p("error"),
        ),
        error_frame(None, "bad_frame", "m"),
    )


def _malformed() -> Iterator[tuple[str, str, str, bytes, str, int | None, int | None]]:
    """(name, direction, why, bytes, code, request id, max_frame_size)."""
    op_step_id7 = (_p("op"), _p("step"), _p("id"), _p(7))
    ok_step = _step(_p(1))
    c = "client"

    def step_with(key: str, value: bytes) -> bytes:
        return _map(*op_step_id7, _p("action"), _p(1), _p(key), value)

    config = _config_open

    def action_array(payload: bytes) -> bytes:
        return _step(_ext(1, payload))

    yield "empty", c, "an empty message", b"", "bad_frame", None, None
    yield "truncated", c, "a valid step frame cut short", ok_step[:-3], "bad_frame", None, None
    yield (
        "truncated_str",
        c,
        "a string whose length runs past the end",
        b"\x82\xa2op\xa5ste",
        "bad_frame",
        None,
        None,
    )
    yield (
        "map_too_short",
        c,
        "map header says 5 pairs, 4 follow",
        b"\x85" + ok_step[1:],
        "bad_frame",
        None,
        None,
    )
    yield (
        "not_a_map_array",
        c,
        "the frame is a MessagePack array",
        _p(["step", 7]),
        "bad_frame",
        None,
        None,
    )
    yield "not_a_map_int", c, "the frame is an integer", _p(7), "bad_frame", None, None
    yield (
        "trailing_bytes",
        c,
        "a second value after the map",
        ok_step + _p(0),
        "bad_frame",
        None,
        None,
    )
    yield (
        "reserved_byte",
        c,
        "byte 0xc1 (never used in MessagePack)",
        b"\xc1",
        "bad_frame",
        None,
        None,
    )
    yield (
        "missing_op",
        c,
        "no op field",
        _map(_p("id"), _p(7), _p("action"), _p(1)),
        "bad_frame",
        None,
        None,
    )
    yield (
        "op_not_string",
        c,
        "op is an integer",
        _map(_p("op"), _p(3), _p("id"), _p(7)),
        "bad_frame",
        None,
        None,
    )
    yield (
        "op_binary",
        c,
        "op is bin, not str",
        _map(_p("op"), _p(b"step"), _p("id"), _p(7)),
        "bad_frame",
        None,
        None,
    )
    yield (
        "missing_id",
        c,
        "no id field",
        _map(_p("op"), _p("step"), _p("action"), _p(1)),
        "bad_frame",
        None,
        None,
    )
    yield (
        "id_nil_client",
        c,
        "id nil (allowed in server error frames only)",
        _map(_p("op"), _p("step"), _p("id"), _p(None), _p("action"), _p(1)),
        "bad_frame",
        None,
        None,
    )
    yield (
        "id_negative",
        c,
        "id -1",
        _map(_p("op"), _p("step"), _p("id"), _p(-1), _p("action"), _p(1)),
        "bad_frame",
        None,
        None,
    )
    yield (
        "id_too_big",
        c,
        "id 2**32",
        _map(_p("op"), _p("step"), _p("id"), _p(2**32), _p("action"), _p(1)),
        "bad_frame",
        None,
        None,
    )
    yield (
        "id_string",
        c,
        "id is a string",
        _map(_p("op"), _p("step"), _p("id"), _p("7"), _p("action"), _p(1)),
        "bad_frame",
        None,
        None,
    )
    yield (
        "id_float",
        c,
        "id is a float",
        _map(_p("op"), _p("step"), _p("id"), _p(7.0), _p("action"), _p(1)),
        "bad_frame",
        None,
        None,
    )
    yield (
        "unknown_op",
        c,
        "op 'jump' is not a client op",
        _map(*op_step_id7[:1], _p("jump"), *op_step_id7[2:]),
        "unknown_op",
        7,
        None,
    )
    yield (
        "server_op_from_client",
        c,
        "op 'result' is a server op",
        _map(_p("op"), _p("result"), _p("id"), _p(7)),
        "unknown_op",
        7,
        None,
    )
    yield (
        "step_missing_action",
        c,
        "step without action",
        _map(*op_step_id7),
        "bad_request",
        7,
        None,
    )
    yield "step_action_bin", c, "action is binary data", _step(_p(b"up")), "bad_request", 7, None
    yield (
        "open_structured_int",
        c,
        "structured is 1, not a boolean",
        _map(_p("op"), _p("open"), _p("id"), _p(7), _p("version"), _p(1), _p("structured"), _p(1)),
        "bad_request",
        7,
        None,
    )
    yield "step_action_bool", c, "action is a boolean", _step(_p(True)), "bad_request", 7, None
    yield (
        "step_obs_int",
        c,
        "obs flag is an integer",
        step_with("obs", _p(1)),
        "bad_request",
        7,
        None,
    )
    yield (
        "reset_seed_negative",
        c,
        "seed -1",
        _map(_p("op"), _p("reset"), _p("id"), _p(7), _p("seed"), _p(-1)),
        "bad_request",
        7,
        None,
    )
    yield (
        "reset_seed_string",
        c,
        "seed is a string",
        _map(_p("op"), _p("reset"), _p("id"), _p(7), _p("seed"), _p("42")),
        "bad_request",
        7,
        None,
    )
    yield (
        "reset_options_list",
        c,
        "options is a list",
        _map(_p("op"), _p("reset"), _p("id"), _p(7), _p("options"), _p([1])),
        "bad_request",
        7,
        None,
    )
    yield (
        "open_missing_version",
        c,
        "open without version",
        _map(_p("op"), _p("open"), _p("id"), _p(7)),
        "bad_request",
        7,
        None,
    )
    yield (
        "open_version_string",
        c,
        "version is a string",
        _map(_p("op"), _p("open"), _p("id"), _p(7), _p("version"), _p("1")),
        "bad_request",
        7,
        None,
    )
    yield (
        "open_config_list",
        c,
        "config is a list",
        config(_p(["game", "pong"])),
        "bad_request",
        7,
        None,
    )
    yield (
        "open_token_int",
        c,
        "token is an integer",
        _map(_p("op"), _p("open"), _p("id"), _p(7), _p("version"), _p(1), _p("token"), _p(5)),
        "bad_request",
        7,
        None,
    )
    yield (
        "open_palette_int",
        c,
        "palette is an integer, not a bool",
        _map(_p("op"), _p("open"), _p("id"), _p(7), _p("version"), _p(1), _p("palette"), _p(1)),
        "bad_request",
        7,
        None,
    )
    yield (
        "restore_snapshot_str",
        c,
        "snapshot is str, not bin",
        _map(_p("op"), _p("restore"), _p("id"), _p(7), _p("snapshot"), _p("abc")),
        "bad_request",
        7,
        None,
    )
    yield (
        "config_too_deep",
        c,
        "config nests 9 levels of lists/maps",
        config(b"\x81\xa1k" + _deep(8)),
        "bad_request",
        7,
        None,
    )
    yield (
        "depth_bomb",
        c,
        "100000 nested arrays in config",
        config(_deep(100_000)),
        "bad_frame",
        None,
        None,
    )
    yield (
        "config_int_key",
        c,
        "a map key in config is an integer",
        config(b"\x81\x01\x02"),
        "bad_frame",
        None,
        None,
    )
    yield (
        "top_level_int_key",
        c,
        "a map key of the frame is an integer",
        _map(*op_step_id7, _p("action"), _p(1), _p(1), _p(2)),
        "bad_frame",
        None,
        None,
    )
    yield (
        "unknown_field_bin_key",
        c,
        "an unknown field whose key is bin",
        _map(*op_step_id7, _p("action"), _p(1), _p(b"k"), _p(2)),
        "bad_frame",
        None,
        None,
    )
    yield (
        "invalid_utf8_op",
        c,
        "op holds invalid UTF-8",
        _map(_p("op"), b"\xa4st\xffp", _p("id"), _p(7), _p("action"), _p(1)),
        "bad_frame",
        None,
        None,
    )
    yield (
        "invalid_utf8_config",
        c,
        "a config string holds invalid UTF-8",
        config(b"\x81\xa4game\xa2\xc3\x28"),
        "bad_frame",
        None,
        None,
    )
    yield (
        "huge_bin_length",
        c,
        "bin 32 declaring 4 GiB in a small frame",
        _map(_p("op"), _p("restore"), _p("id"), _p(7), _p("snapshot"), b"\xc6\xff\xff\xff\xff\x00"),
        "bad_frame",
        None,
        None,
    )
    yield (
        "huge_array_count",
        c,
        "array 32 declaring 2**32-1 items",
        config(b"\x81\xa1k\xdd\xff\xff\xff\xff\x00"),
        "bad_frame",
        None,
        None,
    )
    yield (
        "ext_unknown_type",
        c,
        "extension type 2",
        _step(_ext(2, b"\x00")),
        "bad_frame",
        None,
        None,
    )
    yield (
        "ext_timestamp",
        c,
        "extension type -1 (timestamp) as action",
        _step(b"\xd6\xff\x00\x00\x00\x01"),
        "bad_frame",
        None,
        None,
    )
    yield (
        "ext_timestamp_unknown_field",
        c,
        "extension type -1 in an unknown field",
        step_with("when", b"\xd6\xff\x00\x00\x00\x01"),
        "bad_frame",
        None,
        None,
    )
    yield (
        "array_short_header",
        c,
        "array ext of 1 byte",
        action_array(b"\x01"),
        "bad_frame",
        None,
        None,
    )
    yield (
        "array_unknown_dtype",
        c,
        "dtype code 12",
        action_array(_array_payload(12, [1], b"\x00")),
        "bad_frame",
        None,
        None,
    )
    yield (
        "array_too_many_dims",
        c,
        "17 dimensions",
        action_array(_array_payload(1, [1] * 17, b"\x00")),
        "bad_frame",
        None,
        None,
    )
    yield (
        "array_shape_cut",
        c,
        "ndim 3 but only 2 dims present",
        action_array(b"\x01\x03" + struct.pack("<2I", 1, 1)),
        "bad_frame",
        None,
        None,
    )
    yield (
        "array_size_mismatch",
        c,
        "shape [2, 2] float32 needs 16 bytes, 12 present",
        action_array(_array_payload(10, [2, 2], bytes(12))),
        "bad_frame",
        None,
        None,
    )
    yield (
        "array_extra_data",
        c,
        "shape [2] uint8 needs 2 bytes, 3 present",
        action_array(_array_payload(1, [2], bytes(3))),
        "bad_frame",
        None,
        None,
    )
    yield (
        "array_absurd_shape",
        c,
        "shape [2**32-1, 2**32-1] with 1 data byte",
        action_array(_array_payload(1, [2**32 - 1, 2**32 - 1], b"\x00")),
        "bad_frame",
        None,
        None,
    )
    yield (
        "array_absurd_zero_size",
        c,
        "shape [0] + 15 x 2**32-1: zero-size but too large to exist",
        action_array(_array_payload(1, [0] + [2**32 - 1] * 15, b"")),
        "bad_frame",
        None,
        None,
    )
    yield (
        "array_bool_not_01",
        c,
        "bool array holding byte 2",
        action_array(_array_payload(0, [2], b"\x01\x02")),
        "bad_frame",
        None,
        None,
    )
    yield (
        "too_big",
        c,
        "a frame above the receiver's limit of 64 bytes",
        _map(*op_step_id7, _p("action"), _p(1), _p("pad"), _p(b"\x00" * 70)),
        "too_big",
        None,
        64,
    )

    s = "server"
    result_head = (_p("op"), _p("result"), _p("id"), _p(7))
    flags = (_p("terminated"), _p(False), _p("truncated"), _p(False), _p("done"), _p(False))
    yield (
        "result_missing_reward",
        s,
        "result without reward",
        _map(*result_head, *flags),
        "bad_request",
        7,
        None,
    )
    yield (
        "result_reward_nan",
        s,
        "reward is NaN",
        _map(*result_head, _p("reward"), _p(math.nan), *flags),
        "bad_request",
        7,
        None,
    )
    yield (
        "result_reward_string",
        s,
        "reward is a string",
        _map(*result_head, _p("reward"), _p("1"), *flags),
        "bad_request",
        7,
        None,
    )
    yield (
        "result_obs_int_key",
        s,
        "obs is a map with an integer key (structured values have string keys)",
        _map(*result_head, _p("obs"), _p({1: 2}), _p("reward"), _p(0.0), *flags),
        "bad_frame",
        7,
        None,
    )
    yield (
        "result_obs_too_deep",
        s,
        "obs nests lists 9 levels deep",
        _map(*result_head, _p("obs"), _deep(9), _p("reward"), _p(0.0), *flags),
        "bad_request",
        7,
        None,
    )
    yield (
        "result_done_nil",
        s,
        "done is nil",
        _map(*result_head, _p("reward"), _p(0.0), *flags[:4], _p("done"), _p(None)),
        "bad_request",
        7,
        None,
    )
    yield (
        "opened_missing_spec",
        s,
        "opened without spec",
        _map(
            _p("op"), _p("opened"), _p("id"), _p(1), _p("session_id"), _p("s"), _p("version"), _p(1)
        ),
        "bad_request",
        1,
        None,
    )
    opened_head = (_p("op"), _p("opened"), _p("id"), _p(1), _p("session_id"), _p("s"))
    yield (
        "opened_spec_too_deep",
        s,
        "spec nests lists 33 levels deep (a spec may nest 32)",
        _map(*opened_head, _p("version"), _p(1), _p("spec"), b"\x81" + _p("x") + _deep(32)),
        "bad_request",
        1,
        None,
    )

    def opened_with_palette(value: Any) -> bytes:
        head = (_p("op"), _p("opened"), _p("id"), _p(1), _p("session_id"), _p("s"))
        return _map(*head, _p("version"), _p(1), _p("spec"), _p({}), _p("palette"), _p(value))

    yield (
        "opened_palette_short",
        s,
        "palette of 767 bytes (a palette holds 768)",
        opened_with_palette(_PALETTE[:-1]),
        "bad_request",
        1,
        None,
    )
    yield (
        "opened_palette_str",
        s,
        "palette is str, not bin",
        opened_with_palette("rgb"),
        "bad_request",
        1,
        None,
    )
    yield (
        "error_missing_fatal",
        s,
        "error without fatal",
        _map(
            _p("op"),
            _p("error"),
            _p("id"),
            _p(None),
            _p("code"),
            _p("internal"),
            _p("message"),
            _p("m"),
        ),
        "bad_request",
        None,
        None,
    )
    yield from _malformed_vector()
    yield (
        "client_op_from_server",
        s,
        "op 'step' is a client op",
        _step(_p(1)),
        "unknown_op",
        7,
        None,
    )


def _malformed_vector() -> Iterator[tuple[str, str, str, bytes, str, int | None, int | None]]:
    """Malformed frames of vector sessions (section 21)."""
    c, s = "client", "server"
    head = (_p("op"), _p("open"), _p("id"), _p(1), _p("version"), _p(1))
    for name, why, pairs in (
        ("open_num_envs_zero", "num_envs 0", (_p("num_envs"), _p(0))),
        ("open_num_envs_negative", "num_envs -1", (_p("num_envs"), _p(-1))),
        ("open_num_envs_huge", "num_envs above 65536", (_p("num_envs"), _p(65537))),
        ("open_num_envs_float", "num_envs 4.0, a float", (_p("num_envs"), _p(4.0))),
        ("open_num_envs_str", "num_envs '4', a string", (_p("num_envs"), _p("4"))),
        ("open_batch_size_alone", "batch_size without num_envs", (_p("batch_size"), _p(2))),
        (
            "open_batch_size_above",
            "batch_size 5 above num_envs 4",
            (_p("num_envs"), _p(4), _p("batch_size"), _p(5)),
        ),
    ):
        yield name, c, why, _map(*head, *pairs), "bad_request", 1, None

    def send(*pairs: bytes) -> bytes:
        return _map(_p("op"), _p("send"), _p("id"), _p(4), *pairs)

    ints = _ext(1, _array_payload(6, [2], struct.pack("<2i", 1, 2)))  # int32 [1, 2]
    for name, why, data in (
        ("send_no_action", "send without action", send(_p("env_ids"), _p([1, 2]))),
        ("send_action_int", "action is one integer", send(_p("action"), _p(3))),
        (
            "send_action_0d",
            "action is a float32 array of no dimension (no row per env)",
            send(_p("action"), _ext(1, _array_payload(10, [], struct.pack("<f", 1)))),
        ),
        ("send_action_nested", "action is a list holding a list", send(_p("action"), _p([1, [2]]))),
        ("send_action_float_item", "action list holds 1.5", send(_p("action"), _p([1, 1.5]))),
        (
            "send_env_ids_str",
            "env_ids is a string",
            send(_p("action"), ints, _p("env_ids"), _p("01")),
        ),
        (
            "send_env_ids_length",
            "3 env ids for 2 actions",
            send(_p("action"), ints, _p("env_ids"), _p([0, 1, 2])),
        ),
    ):
        yield name, c, why, data, "bad_request", 4, None

    def batch(reward: bytes, flags: bytes, env_id: bytes, *info: bytes) -> bytes:
        return _map(
            _p("op"),
            _p("batch"),
            _p("id"),
            _p(4),
            _p("reward"),
            reward,
            _p("terminated"),
            flags,
            _p("truncated"),
            flags,
            _p("env_id"),
            env_id,
            *info,
        )

    f64 = _ext(1, _array_payload(11, [2], struct.pack("<2d", 0, 1)))
    flags = _ext(1, _array_payload(0, [2], b"\x00\x01"))
    ids = _ext(1, _array_payload(6, [2], struct.pack("<2i", 0, 1)))
    for name, why, data in (
        (
            "batch_reward_float32",
            "reward is float32",
            batch(_ext(1, _array_payload(10, [2], struct.pack("<2f", 0, 1))), flags, ids),
        ),
        ("batch_reward_list", "reward is a list", batch(_p([0.0, 1.0]), flags, ids)),
        (
            "batch_env_id_int64",
            "env_id is int64",
            batch(f64, flags, _ext(1, _array_payload(8, [2], struct.pack("<2q", 0, 1)))),
        ),
        (
            "batch_rows_differ",
            "3 env ids for 2 rewards",
            batch(f64, flags, _ext(1, _array_payload(6, [3], struct.pack("<3i", 0, 1, 2)))),
        ),
        (
            "batch_info_rows_differ",
            "an info column of 1 row in a batch of 2",
            batch(
                f64,
                flags,
                ids,
                _p("info"),
                _map(_p("lives"), _ext(1, _array_payload(6, [1], struct.pack("<i", 3)))),
            ),
        ),
    ):
        yield name, s, why, data, "bad_request", 4, None


# --------------------------------------------------------------------------- output


def describe_frame(frame: Any, *, data_ref: dict[str, int] | None = None) -> dict[str, Any]:
    """The JSON notation of a frame: op, id, then every field in wire order."""
    return {
        key: describe(value, data_ref=data_ref if key == "obs" else None)
        for key, value in frame_fields(frame).items()
    }


# ----------------------------------------------------------------- compressed (section 19)

# Three 12x8 frames of colour codes: _FRAME_B differs from _FRAME_A in five
# pixels, _FRAME_C from _FRAME_B in one. The compressed bytes are written out
# (made once with the reference packer) so that the vectors do not depend on
# the version of a compression library.
_FRAME_A = (np.arange(96, dtype=np.uint8) * 2).reshape(12, 8)
_FRAME_B = _FRAME_A.copy()
_FRAME_B[3, 2:6] = 7
_FRAME_B[10, 1] = 200
_FRAME_C = _FRAME_B.copy()
_FRAME_C[0, 0] = 1
_HEAD_A = "000100000001020c00000008000000"  # key frame, serial 1, uint8 [12, 8]
_ZSTD_A = (
    "c7790302" + _HEAD_A + "28b52ffd206001030000020406080a0c0e10121416181a1c1e20222426282a2c2e"
    "30323436383a3c3e40424446484a4c4e50525456585a5c5e60626466686a6c6e70727476787a7c7e8082848688"
    "8a8c8e90929496989a9c9ea0a2a4a6a8aaacaeb0b2b4b6b8babcbe"
)
_ZSTD_B = (
    "c72b0302010200000001020c0000000800000028b52ffd206095000048000033313f3d006a00031000073ed22016"
)
_ZSTD_C = "c7210302010300000001020c0000000800000028b52ffd206045000010010001003b012c"
_LZ4_A = (
    "c7720301" + _HEAD_A + "f05100020406080a0c0e10121416181a1c1e20222426282a2c2e30323436383a3c3e"
    "40424446484a4c4e50525456585a5c5e60626466686a6c6e70727476787a7c7e80828486888a8c8e9092949698"
    "9a9c9ea0a2a4a6a8aaacaeb0b2b4b6b8babcbe"
)
_LZ4_B = (
    "c72b0301010200000001020c000000080000001f000100064f33313f3d1d00060f020007156a1b00500000000000"
)
_LZ4_C = "c71c0301010300000001020c000000080000002f0100010046500000000000"


def _swap(hex_value: str, at: int, byte: str) -> str:
    """`hex_value` with the byte at offset `at` replaced by `byte` (hex)."""
    return hex_value[: 2 * at] + byte + hex_value[2 * at + 2 :]


def _cut(hex_value: str, count: int) -> str:
    """An ext 8 value in `hex_value` with its last `count` bytes left out."""
    data = bytes.fromhex(hex_value)
    assert data[0] == 0xC7
    return (bytes((0xC7, data[1] - count)) + data[2:-count]).hex()


def _compressed() -> Iterator[tuple[str, str, str, bool, list[tuple[str, np.ndarray[Any, Any]]]]]:
    frames = [_FRAME_A, _FRAME_B, _FRAME_C]
    yield (
        "zstd_delta",
        "zstd: a key frame, then two delta frames (XOR with the previous observation)",
        "zstd",
        True,
        list(zip([_ZSTD_A, _ZSTD_B, _ZSTD_C], frames, strict=True)),
    )
    yield (
        "lz4_delta",
        "lz4: a key frame, then two delta frames",
        "lz4",
        True,
        list(zip([_LZ4_A, _LZ4_B, _LZ4_C], frames, strict=True)),
    )
    yield ("zstd_key", "zstd without deltas: a key frame", "zstd", False, [(_ZSTD_A, _FRAME_A)])
    yield ("lz4_key", "lz4 without deltas: a key frame", "lz4", False, [(_LZ4_A, _FRAME_A)])


def _compressed_malformed() -> Iterator[tuple[str, str, str, bool, int, list[str], str, str]]:
    limit = _FRAME_A.nbytes
    yield ("delta_first", "a delta frame with no observation before it", "zstd", True, limit,
           [], _ZSTD_B, "but this client holds none")  # fmt: skip
    yield ("delta_gap", "a delta frame against observation 2 after observation 1", "zstd", True,
           limit, [_ZSTD_A], _ZSTD_C, "applies to observation 2")  # fmt: skip
    yield ("delta_not_negotiated", "a delta frame in a session without deltas", "lz4", False,
           limit, [_LZ4_A], _LZ4_B, "did not negotiate deltas")  # fmt: skip
    yield ("over_limit", "96 bytes declared where observations hold at most 95", "zstd", True,
           limit - 1, [], _ZSTD_A, "declares 96 bytes")  # fmt: skip
    yield ("other_codec", "an lz4 frame in a zstd session", "zstd", True, limit, [], _LZ4_A,
           "uses codec 'lz4'")  # fmt: skip
    yield ("unknown_flags", "flags 0x02", "zstd", True, limit, [], _swap(_ZSTD_A, 4, "02"),
           "unknown flags 0x02")  # fmt: skip
    yield ("zstd_size_mismatch", "zstd frame whose content size (95) is not the array's",
           "zstd", True, limit, [], _swap(_ZSTD_A, 24, "5f"), "declares 95 bytes")  # fmt: skip
    yield ("zstd_damaged", "zstd frame with a damaged block header", "zstd", True, limit, [],
           _swap(_ZSTD_A, 25, "ff"), "is damaged")  # fmt: skip
    yield ("lz4_truncated", "lz4 block cut short", "lz4", True, limit, [], _cut(_LZ4_A, 10),
           "is damaged")  # fmt: skip
    yield ("short_header", "5 bytes, shorter than the 6-byte header", "lz4", True, limit, [],
           "c705030100010000", "shorter than its 6-byte header")  # fmt: skip


def build() -> dict[str, bytes]:
    """Every file of ``protocol/vectors/``: name -> exact bytes."""
    frames = []
    for name, direction, description, frame in _frames():
        frames.append(
            {
                "name": name,
                "direction": direction,
                "description": description,
                "frame": describe_frame(frame),
                "hex": encode(frame).hex(),
            }
        )

    full = Result(
        id=12,
        obs=_rgb(210, 160),
        reward=1.0,
        info={"lives": 3, "episode_frame_number": 4000, "frame_number": 12000},
    )
    full_bytes = encode(full)
    raw = full.obs.tobytes()  # type: ignore[union-attr]
    offset = full_bytes.index(raw)
    frames.append(
        {
            "name": "result_rgb_210x160x3",
            "direction": "server",
            "description": "result with a full Atari RGB frame (the bytes are in 'file')",
            "frame": describe_frame(full, data_ref={"offset": offset, "length": len(raw)}),
            "file": FULL_FRAME_FILE,
        }
    )

    decode_only = [
        {
            "name": name,
            "direction": direction,
            "description": description,
            "frame": describe_frame(frame),
            "hex": data.hex(),
        }
        for name, direction, description, data, frame in _decode_only()
    ]

    arrays = []
    for name, description, arr in ARRAYS:
        head, body = _array_parts(arr)
        arrays.append(
            {
                "name": name,
                "description": description,
                "value": describe(arr),
                "hex": (head + body).hex(),
            }
        )

    malformed = []
    for name, direction, why, data, code, rid, limit in _malformed():
        entry: dict[str, Any] = {
            "name": name,
            "direction": direction,
            "description": why,
            "code": code,
            "id": rid,
            "max_frame_size": limit if limit is not None else _default_limit(direction),
        }
        if len(data) > 512:
            entry["hex_runs"] = _runs(data)
        else:
            entry["hex"] = data.hex()
        malformed.append(entry)

    compressed = [
        {
            "name": name,
            "description": why,
            "codec": codec,
            "delta": delta,
            "max_bytes": _FRAME_A.nbytes,
            "values": [{"hex": hex_value, "value": describe(arr)} for hex_value, arr in values],
        }
        for name, why, codec, delta, values in _compressed()
    ]
    compressed_malformed = [
        {
            "name": name,
            "description": why,
            "codec": codec,
            "delta": delta,
            "max_bytes": limit,
            "before": before,
            "hex": hex_value,
            "error": error,
        }
        for name, why, codec, delta, limit, before, hex_value, error in _compressed_malformed()
    ]

    doc = {
        "protocol_version": PROTOCOL_VERSION,
        "format": FORMAT,
        "frames": frames,
        "decode_only": decode_only,
        "arrays": arrays,
        "compressed": compressed,
        "compressed_malformed": compressed_malformed,
        "malformed": malformed,
    }
    text = json.dumps(doc, indent=1, ensure_ascii=True) + "\n"
    return {"vectors.json": text.encode("ascii"), FULL_FRAME_FILE: full_bytes}


def _default_limit(direction: str) -> int:
    from openenv_ws.protocol import DEFAULT_MAX_FRAME_SIZE, DEFAULT_MAX_SERVER_FRAME_SIZE

    return DEFAULT_MAX_FRAME_SIZE if direction == "client" else DEFAULT_MAX_SERVER_FRAME_SIZE


def _array_parts(arr: np.ndarray[Any, Any]) -> tuple[bytes, bytes]:
    from openenv_ws._arrays import array_ext_parts

    head, body = array_ext_parts(arr)
    return head, bytes(body)


def _runs(data: bytes) -> list[list[Any]]:
    """Long inputs as [hex, count] runs: the bytes are each hex repeated count times, joined."""
    runs: list[list[Any]] = []
    literal = bytearray()
    i = 0
    while i < len(data):
        j = i
        while j < len(data) and data[j] == data[i]:
            j += 1
        if j - i >= 16:
            if literal:
                runs.append([literal.hex(), 1])
                literal.clear()
            runs.append([data[i : i + 1].hex(), j - i])
        else:
            literal += data[i:j]
        i = j
    if literal:
        runs.append([literal.hex(), 1])
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    files = build()
    if args.check:
        stale = [
            n
            for n, b in files.items()
            if not (VECTORS_DIR / n).is_file() or (VECTORS_DIR / n).read_bytes() != b
        ]
        for name in stale:
            print(f"{VECTORS_DIR / name} is out of date; run python protocol/make_vectors.py")
        return 1 if stale else 0
    VECTORS_DIR.mkdir(exist_ok=True)
    for name, data in files.items():
        (VECTORS_DIR / name).write_bytes(data)
        print(f"wrote {VECTORS_DIR / name} ({len(data)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
