"""The page's JavaScript codec (``openenv_ws/web/static/protocol.js``) against the golden vectors.

Every vector of ``protocol/vectors/`` goes through the JS codec under Node in
one run: canonical frames must encode to their exact bytes and decode to their
values, non-canonical ones must decode, arrays must round-trip, and malformed
inputs must be refused with the vector's error code. So the browser cannot
drift from the spec the Python codec is held to.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ..wire.protocol.vectorlib import ROOT, entry_bytes, vectors

PROTOCOL_JS = ROOT / "openenv_ws" / "web" / "static" / "protocol.js"
RUNNER = Path(__file__).with_name("codec_vectors.mjs")
# JS typed array each dtype decodes into (float16 as its raw bits).
TYPED = {
    "bool": "Uint8Array",
    "uint8": "Uint8Array",
    "int8": "Int8Array",
    "uint16": "Uint16Array",
    "int16": "Int16Array",
    "uint32": "Uint32Array",
    "int32": "Int32Array",
    "uint64": "BigUint64Array",
    "int64": "BigInt64Array",
    "float16": "Uint16Array",
    "float32": "Float32Array",
    "float64": "Float64Array",
}
_JS_SAFE = 2**53 - 1


def _note(note: Any, file_bytes: bytes | None = None) -> Any:
    """Vector notation as the runner reads it: arrays as hex, big integers as ``$int``."""
    if type(note) is int and abs(note) > _JS_SAFE:
        return {"$int": str(note)}
    if type(note) is list:
        return [_note(n, file_bytes) for n in note]
    if type(note) is not dict:
        return note
    if set(note) == {"$array"}:
        a = note["$array"]
        if "base64" in a:
            raw = base64.b64decode(a["base64"])
        elif "file_data" in a:
            assert file_bytes is not None
            ref = a["file_data"]
            raw = file_bytes[ref["offset"] : ref["offset"] + ref["length"]]
        else:
            raw = bytes.fromhex(a["hex"])
        return {"$array": {"dtype": a["dtype"], "shape": a["shape"], "hex": raw.hex()}}
    if set(note) in ({"$float"}, {"$bin"}):
        return note
    return {k: _note(v, file_bytes) for k, v in note.items()}


def _cases() -> list[dict[str, Any]]:
    """One case per thing to check; ``key`` names it, ``kind`` says what the runner does."""
    v = vectors()
    cases: list[dict[str, Any]] = []

    def add(key: str, kind: str, **fields: Any) -> None:
        cases.append({"key": key, "kind": kind, **fields})

    for e in v["frames"]:
        data = entry_bytes(e)
        value = _note(e["frame"], data if "file" in e else None)
        key, direction = f"frames/{e['name']}", e["direction"]
        add(f"{key}/encode", "encode_frame", direction=direction, value=value, want_hex=data.hex())
        add(f"{key}/decode", "decode_frame", direction=direction, hex=data.hex(), want=value)
    for e in v["decode_only"]:
        hex_ = entry_bytes(e).hex()
        want = _note(e["frame"])
        add(
            f"decode_only/{e['name']}",
            "decode_frame",
            direction=e["direction"],
            hex=hex_,
            want=want,
        )
    for e in v["arrays"]:
        value = _note(e["value"])
        add(f"arrays/{e['name']}/encode", "encode_value", value=value, want_hex=e["hex"])
        add(f"arrays/{e['name']}/decode", "decode_value", hex=e["hex"], want=value)
    for e in v["malformed"]:
        add(
            f"malformed/{e['name']}",
            "decode_frame",
            direction=e["direction"],
            hex=entry_bytes(e).hex(),
            max_frame_size=e["max_frame_size"],
            want_error={"code": e["code"], "id": e["id"]},
        )
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def js_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    node = shutil.which("node")
    if node is None:
        pytest.skip(
            "Node.js is not installed: the page's JS codec cannot be run (apt-get install nodejs)"
        )
    folder = tmp_path_factory.mktemp("web-codec")
    cases_file = folder / "cases.json"
    cases_file.write_text(json.dumps(CASES), encoding="ascii")
    # The page's modules in a folder of an ES-module package: protocol.js imports its siblings.
    for module in PROTOCOL_JS.parent.glob("*.js"):
        shutil.copy(module, folder / module.name)
    (folder / "package.json").write_text('{"type": "module"}\n', encoding="ascii")
    proc = subprocess.run(
        [node, str(RUNNER), str(folder / PROTOCOL_JS.name), str(cases_file)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"node failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    results: dict[str, Any] = json.loads(proc.stdout)
    assert set(results) == {c["key"] for c in CASES}
    return results


def _arrays_typed(value: Any) -> list[tuple[str, str]]:
    """(dtype, typed array class) of every array in a decoded note; strips the class."""
    found: list[tuple[str, str]] = []
    if type(value) is list:
        for v in value:
            found += _arrays_typed(v)
    elif type(value) is dict:
        if set(value) == {"$array"}:
            found.append((value["$array"]["dtype"], value["$array"].pop("typed")))
        else:
            for v in value.values():
                found += _arrays_typed(v)
    return found


def _floats(note: Any) -> Any:
    """JSON from JS writes the float 1.0 as 1: read every ``$float`` as a Python float."""
    if type(note) is list:
        return [_floats(n) for n in note]
    if type(note) is not dict:
        return note
    if set(note) == {"$float"} and type(note["$float"]) is not str:
        return {"$float": float(note["$float"])}
    return {k: _floats(v) for k, v in note.items()}


def _same(got: Any, want: Any) -> None:
    # json.dumps keeps key order and tells 1 from {"$float": 1.0}: strict equality.
    assert json.dumps(_floats(got)) == json.dumps(_floats(want))


@pytest.mark.parametrize("case", CASES, ids=[c["key"] for c in CASES])
def test_js_codec_matches_vector(case: dict[str, Any], js_results: dict[str, Any]) -> None:
    got = js_results[case["key"]]
    assert "crash" not in got, f"the JS codec threw a non-protocol error: {got['crash']}"
    if "want_error" in case:
        assert "error" in got, f"the JS codec accepted a malformed frame: {got.get('value')}"
        want = case["want_error"]
        assert got["error"]["code"] == want["code"], got["error"]["message"]
        if want["code"] != "bad_frame":  # a bad_frame may echo an id it could read
            assert got["error"]["id"] == want["id"]
        assert got["error"]["message"]
        return
    assert "error" not in got, f"the JS codec refused a valid input: {got.get('error')}"
    if "want_hex" in case:
        assert got["hex"] == case["want_hex"]
        return
    for dtype, typed in _arrays_typed(got["value"]):
        assert typed == TYPED[dtype], f"{dtype} decoded into {typed}"
    _same(got["value"], case["want"])


def test_cases_cover_every_vector() -> None:
    v = vectors()
    total = (
        2 * len(v["frames"]) + len(v["decode_only"]) + 2 * len(v["arrays"]) + len(v["malformed"])
    )
    assert len(CASES) == total
    assert {c["key"].split("/")[0] for c in CASES} == {
        "frames",
        "decode_only",
        "arrays",
        "malformed",
    }
