"""The golden vectors: up to date, and both directions hold for every one of them."""

from __future__ import annotations

import importlib.util
import re
import struct
from typing import Any

import msgpack
import numpy as np
import pytest

from openenv_ws import protocol
from openenv_ws._arrays import array_ext_parts, decode_array
from openenv_ws.errors import PayloadTooBig, ProtocolError

from .vectorlib import ROOT, VECTORS_DIR, assert_same, decoder, entry_bytes, frame, value, vectors

V = vectors()


def _ids(entries: list[dict[str, Any]]) -> list[str]:
    return [e["name"] for e in entries]


def _load_generator() -> Any:
    spec = importlib.util.spec_from_file_location(
        "make_vectors", ROOT / "protocol" / "make_vectors.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_files_equal_generator_output() -> None:
    files = _load_generator().build()
    on_disk = {p.name for p in VECTORS_DIR.iterdir()}
    assert on_disk == set(files), "protocol/vectors/ holds files the generator does not write"
    for name, data in files.items():
        assert (VECTORS_DIR / name).read_bytes() == data, (
            f"{name} is out of date; run python protocol/make_vectors.py"
        )


def test_generator_is_deterministic() -> None:
    gen = _load_generator()
    assert gen.build() == gen.build()


def test_vectors_cover_every_op_and_error_code() -> None:
    ops = {(e["direction"], e["frame"]["op"]) for e in V["frames"]}
    client_ops = {"open", "reset", "step", "send", "state", "snapshot", "restore", "close"}
    server_ops = {"opened", "result", "batch", "state", "snapshot", "closed", "error"}
    assert ops == {("client", o) for o in client_ops} | {("server", o) for o in server_ops}
    codes = {e["frame"]["code"] for e in V["frames"] if e["frame"]["op"] == "error"}
    assert codes == set(protocol.ERRORS)
    assert {e["code"] for e in V["malformed"]} == {
        "bad_frame",
        "unknown_op",
        "bad_request",
        "too_big",
    }
    dtypes = {e["value"]["$array"]["dtype"] for e in V["arrays"]}
    assert dtypes == {
        "bool",
        "uint8",
        "int8",
        "uint16",
        "int16",
        "uint32",
        "int32",
        "uint64",
        "int64",
        "float16",
        "float32",
        "float64",
    }
    shapes = [tuple(e["value"]["$array"]["shape"]) for e in V["arrays"]]
    assert () in shapes and any(0 in s for s in shapes) and (128,) in shapes


@pytest.mark.parametrize("entry", V["frames"], ids=_ids(V["frames"]))
def test_frame_encodes_to_its_bytes(entry: dict[str, Any]) -> None:
    assert protocol.encode(frame(entry)) == entry_bytes(entry)


@pytest.mark.parametrize("entry", V["frames"], ids=_ids(V["frames"]))
def test_frame_bytes_decode_to_the_frame(entry: dict[str, Any]) -> None:
    data = entry_bytes(entry)
    got = decoder(entry["direction"])(data)
    assert_same(got, frame(entry))


def _independent_canonical(frame_obj: Any) -> bytes:
    """Canonical bytes built with plain msgpack, without the codec under test."""

    def ext(arr: np.ndarray[Any, Any]) -> msgpack.ExtType:
        codes = {
            "bool": 0,
            "uint8": 1,
            "int8": 2,
            "uint16": 3,
            "int16": 4,
            "uint32": 5,
            "int32": 6,
            "uint64": 7,
            "int64": 8,
            "float16": 9,
            "float32": 10,
            "float64": 11,
        }
        head = struct.pack(f"<BB{arr.ndim}I", codes[arr.dtype.name], arr.ndim, *arr.shape)
        return msgpack.ExtType(1, head + arr.astype(arr.dtype.newbyteorder("<")).tobytes())

    def plain(v: Any) -> Any:
        if isinstance(v, np.ndarray):
            return ext(v)
        if type(v) is list:
            return [plain(x) for x in v]
        if type(v) is dict:
            return {k: plain(x) for k, x in v.items()}
        return v

    return msgpack.packb(plain(dict(protocol.frame_fields(frame_obj))), use_bin_type=True)


@pytest.mark.parametrize("entry", V["frames"], ids=_ids(V["frames"]))
def test_frame_bytes_are_canonical_msgpack(entry: dict[str, Any]) -> None:
    """Field order, smallest forms and float64: what any MessagePack library writes."""
    assert _independent_canonical(frame(entry)) == entry_bytes(entry)


def test_full_size_rgb_frame_file() -> None:
    (entry,) = [e for e in V["frames"] if "file" in e]
    data = entry_bytes(entry)
    got = protocol.decode_server_frame(data)
    assert isinstance(got, protocol.Result) and got.obs is not None
    assert got.obs.shape == (210, 160, 3) and got.obs.dtype == np.uint8
    assert len(np.unique(got.obs.reshape(-1, 3), axis=0)) >= 3, "the frame is not a picture"
    assert len(data) < 110_000


@pytest.mark.parametrize("entry", V["decode_only"], ids=_ids(V["decode_only"]))
def test_noncanonical_encodings_decode(entry: dict[str, Any]) -> None:
    data = entry_bytes(entry)
    want = frame(entry)
    assert_same(decoder(entry["direction"])(data), want)
    assert protocol.encode(want) != data, "a decode_only vector must not be canonical"


@pytest.mark.parametrize("entry", V["arrays"], ids=_ids(V["arrays"]))
def test_array_vectors(entry: dict[str, Any]) -> None:
    data = entry_bytes(entry)
    want = value(entry["value"])
    head, body = array_ext_parts(want)
    assert head + bytes(body) == data
    got = msgpack.unpackb(data, ext_hook=lambda code, payload: decode_array(payload))
    assert_same(got, want)
    assert not got.flags.writeable


# What each refusal's message must name, so a user can tell what went wrong.
MESSAGES = {
    "empty": "truncated",
    "truncated": "truncated",
    "truncated_str": "truncated",
    "map_too_short": "truncated",
    "not_a_map_array": "must be a MessagePack map, got list",
    "not_a_map_int": "must be a MessagePack map, got int",
    "trailing_bytes": "bytes after its MessagePack map",
    "reserved_byte": "0xc1",
    "missing_op": "'op'",
    "op_not_string": "'op'",
    "op_binary": "'op'",
    "missing_id": "'id'",
    "id_nil_client": "nil is allowed in error frames only",
    "id_negative": "'id'",
    "id_too_big": "'id'",
    "id_string": "'id'",
    "id_float": "'id'",
    "unknown_op": "op 'jump' is unknown",
    "server_op_from_client": "op 'result' is unknown",
    "step_missing_action": "needs field 'action'",
    "step_action_bin": "field 'action' must be .* got bytes",
    "open_structured_int": "field 'structured' must be a boolean, got int 1",
    "step_action_bool": "field 'action' must be .* got bool True",
    "step_obs_int": "field 'obs' must be a boolean, got int 1",
    "reset_seed_negative": "field 'seed' must be a non-negative integer, got int -1",
    "reset_seed_string": "field 'seed' must be a non-negative integer, got str '42'",
    "reset_options_list": "field 'options' must be a map, got list",
    "open_missing_version": "needs field 'version'",
    "open_version_string": "field 'version' must be an integer",
    "open_config_list": "field 'config' must be a map, got list",
    "open_token_int": "field 'token' must be a string, got int 5",
    "restore_snapshot_str": "field 'snapshot' must be binary data, got str",
    "open_palette_int": "field 'palette' must be a boolean, got int 1",
    "config_too_deep": "field 'config' nests lists/maps deeper than 8 levels",
    "depth_bomb": "nests deeper than 1024 levels",
    "config_int_key": "map key is not a string",
    "top_level_int_key": "map key is not a string",
    "unknown_field_bin_key": "non-string map key",
    "invalid_utf8_op": "not valid UTF-8",
    "invalid_utf8_config": "not valid UTF-8",
    "huge_bin_length": "truncated",
    "huge_array_count": "length prefix is larger than the frame",
    "ext_unknown_type": "extension type 2 .* only valid in server results",
    "ext_timestamp": "extension type -1 is not part of protocol v1",
    "ext_timestamp_unknown_field": "extension type other than 1",
    "array_short_header": "shorter than its 2-byte header",
    "array_unknown_dtype": "dtype code 12 is unknown",
    "array_too_many_dims": "17 dimensions; at most 16",
    "array_shape_cut": "declares 3 dimensions but the extension holds only 10 bytes",
    "array_size_mismatch": r"shape \(2, 2\) and dtype float32 needs 16 data bytes, .* carries 12",
    "array_extra_data": "needs 2 data bytes, but the extension carries 3",
    "array_absurd_shape": "needs 18446744065119617025 data bytes",
    "array_absurd_zero_size": "too large to exist",
    "array_bool_not_01": "bool array holds bytes other than 0 and 1",
    "too_big": "above the limit of 64 bytes",
    "result_missing_reward": "needs field 'reward'",
    "result_reward_nan": "field 'reward' must be a number \\(not NaN\\)",
    "result_reward_string": "field 'reward' must be a number, got str '1'",
    "result_obs_int_key": "a map key is not a string",
    "opened_spec_too_deep": "field 'spec' nests lists/maps deeper than 32 levels",
    "result_obs_too_deep": "field 'obs' nests lists/maps deeper than 8 levels",
    "result_done_nil": "field 'done' must be a boolean, got NoneType",
    "opened_missing_spec": "needs field 'spec'",
    "opened_palette_short": r"field 'palette' must be nil or 768 bytes .*, got 767 bytes",
    "opened_palette_str": r"field 'palette' must be nil or 768 bytes .*, got str 'rgb'",
    "error_missing_fatal": "needs field 'fatal'",
    "client_op_from_server": "op 'step' is unknown",
    "open_num_envs_zero": "field 'num_envs' must be nil or an integer in 1..65536, got int 0",
    "open_num_envs_negative": "field 'num_envs' must be nil or an integer in 1..65536, got int -1",
    "open_num_envs_huge": "field 'num_envs' must be nil or an integer in 1..65536, got int 65537",
    "open_num_envs_float": "field 'num_envs' must be nil or an integer .*, got float 4.0",
    "open_num_envs_str": "field 'num_envs' must be nil or an integer .*, got str '4'",
    "open_batch_size_alone": "field 'batch_size' needs 'num_envs'",
    "open_batch_size_above": r"field 'batch_size' \(5\) must be at most 'num_envs' \(4\)",
    "send_no_action": "op 'send' needs field 'action'",
    "send_action_int": "field 'action' must be a 1-d array of an integer dtype .*, got int 3",
    "send_action_0d": r"field 'action' must be .* a row per env, got an array of float32 and shape \[\]",
    "send_action_nested": "field 'action' must be .* a list of integers, got list",
    "send_action_float_item": "field 'action' must be .* a list of integers, got float 1.5",
    "send_env_ids_str": "field 'env_ids' must be .*, got str '01'",
    "send_env_ids_length": "field 'env_ids' has 3 entries and 'action' 2",
    "batch_reward_float32": "field 'reward' must be a 1-d array of float64, got an array of float32",
    "batch_reward_list": "field 'reward' must be a 1-d array of float64, got list",
    "batch_env_id_int64": "field 'env_id' must be a 1-d array of int32, got an array of int64",
    "batch_rows_differ": "field 'env_id' has 3 rows and 'reward' 2",
    "batch_info_rows_differ": "column 'info.lives' has 1 row and 'reward' 2",
}


def test_every_malformed_vector_has_a_message_check() -> None:
    assert set(MESSAGES) == set(_ids(V["malformed"]))


@pytest.mark.parametrize("entry", V["malformed"], ids=_ids(V["malformed"]))
def test_malformed_vectors_are_refused(entry: dict[str, Any]) -> None:
    data = entry_bytes(entry)
    decode = decoder(entry["direction"])
    with pytest.raises(ProtocolError) as info:
        decode(data, max_frame_size=entry["max_frame_size"])
    err = info.value
    assert err.code == entry["code"]
    assert isinstance(err, PayloadTooBig) == (entry["code"] == "too_big")
    if entry["code"] == "bad_frame":
        assert err.request_id in (None, 7)
    else:
        assert err.request_id == entry["id"]
    assert re.search(MESSAGES[entry["name"]], str(err)), str(err)
