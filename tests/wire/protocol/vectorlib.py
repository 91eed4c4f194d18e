"""Reading ``protocol/vectors/``: the JSON value notation, frames, and a strict equality."""

from __future__ import annotations

import base64
import json
import math
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from openenv_ws import protocol

ROOT = Path(__file__).resolve().parents[3]
VECTORS_DIR = ROOT / "protocol" / "vectors"
_CLASSES = {
    "client": {
        c.OP: c
        for c in (
            protocol.Open,
            protocol.Reset,
            protocol.Step,
            protocol.Send,
            protocol.GetState,
            protocol.Snapshot,
            protocol.Restore,
            protocol.Close,
        )
    },
    "server": {
        c.OP: c
        for c in (
            protocol.Opened,
            protocol.Result,
            protocol.Batch,
            protocol.StateReply,
            protocol.SnapshotData,
            protocol.Closed,
            protocol.Error,
        )
    },
}


@cache
def vectors() -> dict[str, Any]:
    """The parsed ``vectors.json``."""
    return json.loads((VECTORS_DIR / "vectors.json").read_text(encoding="ascii"))


def entry_bytes(entry: dict[str, Any]) -> bytes:
    """The exact bytes of a vector entry (``hex``, ``hex_runs`` or ``file``)."""
    if "hex" in entry:
        return bytes.fromhex(entry["hex"])
    if "hex_runs" in entry:
        return b"".join(bytes.fromhex(h) * n for h, n in entry["hex_runs"])
    return (VECTORS_DIR / entry["file"]).read_bytes()


def value(note: Any, *, file_bytes: bytes | None = None) -> Any:
    """The Python value a piece of JSON notation stands for."""
    if note is None or type(note) in (bool, int, str):
        return note
    if type(note) is list:
        return [value(n, file_bytes=file_bytes) for n in note]
    assert type(note) is dict
    if set(note) == {"$float"}:
        return float(note["$float"])  # a number, or "nan" / "inf" / "-inf"
    if set(note) == {"$bin"}:
        return bytes.fromhex(note["$bin"])
    if set(note) == {"$array"}:
        a = note["$array"]
        if "hex" in a:
            raw = bytes.fromhex(a["hex"])
        elif "base64" in a:
            raw = base64.b64decode(a["base64"])
        else:
            assert file_bytes is not None, "file_data needs the entry's file"
            ref = a["file_data"]
            raw = file_bytes[ref["offset"] : ref["offset"] + ref["length"]]
        dtype = np.dtype(a["dtype"]).newbyteorder("<")
        return np.frombuffer(raw, dtype=dtype).reshape(a["shape"])
    return {k: value(v, file_bytes=file_bytes) for k, v in note.items()}


def frame(entry: dict[str, Any]) -> Any:
    """The typed frame a vector entry describes."""
    file_bytes = entry_bytes(entry) if "file" in entry else None
    fields = value(entry["frame"], file_bytes=file_bytes)
    cls = _CLASSES[entry["direction"]][fields.pop("op")]
    return cls(**fields)


def decoder(direction: str) -> Any:
    """The decoder a receiver of `direction` frames uses."""
    if direction == "client":
        return protocol.decode_client_frame
    return protocol.decode_server_frame


def assert_same(got: Any, want: Any, where: str = "value") -> None:
    """Strict equality: same types (int is not float), arrays by dtype, shape and bytes."""
    if isinstance(want, np.ndarray):
        assert type(got) is np.ndarray, f"{where}: {type(got).__name__} is not an array"
        wire = want.dtype.newbyteorder("<")
        assert got.dtype == wire, f"{where}: dtype {got.dtype} != {wire}"
        assert got.shape == want.shape, f"{where}: shape {got.shape} != {want.shape}"
        assert got.dtype.byteorder in "<=|", f"{where}: decoded array is not little-endian"
        assert got.tobytes() == want.astype(wire).tobytes(), where
        return
    assert type(got) is type(want), f"{where}: {type(got).__name__} != {type(want).__name__}"
    if type(want) is float and math.isnan(want):
        assert math.isnan(got), f"{where}: {got!r} is not NaN"
    elif type(want) is list:
        assert len(got) == len(want), f"{where}: length {len(got)} != {len(want)}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same(g, w, f"{where}[{i}]")
    elif type(want) is dict:
        assert list(got) == list(want), f"{where}: keys {list(got)} != {list(want)}"
        for k in want:
            assert_same(got[k], want[k], f"{where}.{k}")
    elif hasattr(want, "OP"):
        assert_same(dict(protocol.frame_fields(got)), dict(protocol.frame_fields(want)), want.OP)
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"
