"""The error tree, the ERRORS table against SPEC.md, and the public names of the modules."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path
from types import ModuleType

import pytest

from openenv_ws import _arrays, protocol
from openenv_ws import errors as E
from openenv_ws.protocol import ERRORS, error_code_of, error_frame

from .spec_tables import error_table

#: The codec's modules (the framing's are not re-exported by openenv_ws.protocol).
WIRE = [
    importlib.import_module(f"openenv_ws.wire.{name}")
    for name in ("limits", "codes", "frames", "encode", "checks", "decode", "native", "session")
]
CLOSE_CODES = {1001, 1002, 1003, 1008, 1009, 1011, 1013}
# Codes raised on the client side only; they never travel in an error frame.
LOCAL_CODES = {"invalid_state", "closed", "unavailable", "timeout"}


def test_every_error_derives_from_the_root() -> None:
    classes = [getattr(E, name) for name in E.__all__]
    assert all(issubclass(c, E.OpenEnvError) for c in classes)
    assert issubclass(E.PayloadTooBig, E.ProtocolError)
    assert issubclass(E.RequestTimeout, TimeoutError)
    assert issubclass(E.ServerUnavailable, ConnectionError)
    documented = E.__doc__ or ""
    assert all(name in documented for name in E.__all__), "the tree in the docstring"


def test_errors_table_is_consistent() -> None:
    for code, info in ERRORS.items():
        assert info.fatal == (info.close_code is not None), code
        assert info.close_code is None or info.close_code in CLOSE_CODES, code
        assert info.meaning, code


def test_errors_table_equals_spec() -> None:
    assert error_table() == {c: (i.fatal, i.close_code) for c, i in ERRORS.items()}


@pytest.mark.parametrize(
    "exc, code",
    [
        (E.ProtocolError("x"), "bad_frame"),
        (E.ProtocolError("x", code="bad_request"), "bad_request"),
        (E.ProtocolError("x", code="unknown_op"), "unknown_op"),
        (E.PayloadTooBig(10, 5), "too_big"),
        (E.InvalidState("x", code="not_reset"), "not_reset"),
        (E.InvalidState("x", code="unsupported"), "unsupported"),
        (E.InvalidState("x"), "internal"),
        (E.EnvConfigError("x"), "bad_config"),
        (E.InvalidAction("x"), "invalid_action"),
        (E.AuthError("x"), "auth"),
        (E.RemoteEnvError("episode_over", "x"), "episode_over"),
        (E.SessionClosed(1000, "bye"), "internal"),
        (ValueError("x"), "internal"),
        (KeyboardInterrupt(), "internal"),
    ],
)
def test_error_code_of(exc: BaseException, code: str) -> None:
    assert error_code_of(exc) == code


def test_class_codes_are_wire_codes_or_local() -> None:
    for name in E.__all__:
        code = getattr(E, name).code
        assert code in ERRORS or code in LOCAL_CODES, (name, code)
    assert not LOCAL_CODES & set(ERRORS)


def test_error_frame_follows_the_table() -> None:
    for code, info in ERRORS.items():
        assert error_frame(1, code, "m").fatal is info.fatal
    assert error_frame(None, "no_such_code", "m").fatal is True


def test_protocol_error_carries_the_request_id() -> None:
    assert E.ProtocolError("x").request_id is None
    assert E.ProtocolError("x", request_id=4).request_id == 4
    assert E.PayloadTooBig(2, 1).request_id is None


def _defined_names(module: ModuleType) -> set[str]:
    """Public names a module defines at top level (imports excluded)."""
    tree = ast.parse(Path(inspect.getfile(module)).read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if not n.startswith("_")}


@pytest.mark.parametrize("module", [*WIRE, _arrays, E], ids=lambda m: m.__name__)
def test_exports_equal_all(module: ModuleType) -> None:
    assert set(module.__all__) == _defined_names(module)
    assert len(module.__all__) == len(set(module.__all__))
    for name in module.__all__:
        assert getattr(module, name) is not None


def test_the_protocol_module_re_exports_the_codecs_names() -> None:
    defined = {name: getattr(m, name) for m in WIRE for name in m.__all__}
    assert _defined_names(protocol) == set(), "it only re-exports"
    assert len(protocol.__all__) == len(set(protocol.__all__))
    for name in protocol.__all__:
        assert getattr(protocol, name) is defined[name], name
    assert {"Step", "encode", "decode_client_frame", "SessionMachine", "ERRORS"} <= set(
        protocol.__all__
    )
