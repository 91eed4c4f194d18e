"""The browser codec's generated tables (``openenv_ws/web/static/wire.js``) agree with Python.

``protocol/make_js.py`` writes them from the frames' declaration
(:mod:`openenv_ws.wire.frames`); the checked-in file must be what it writes now.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from openenv_ws import protocol

from ..wire.protocol.vectorlib import ROOT


def _load_generator() -> Any:
    spec = importlib.util.spec_from_file_location("make_js", ROOT / "protocol" / "make_js.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_checked_in_tables_equal_generator_output() -> None:
    gen = _load_generator()
    assert gen.TARGET.read_text(encoding="utf-8") == gen.render(), (
        "openenv_ws/web/static/wire.js is out of date; run python protocol/make_js.py"
    )
    assert gen.main(["--check"]) == 0


def test_tables_name_every_field_of_every_frame() -> None:
    text = _load_generator().render()
    for cls in (*protocol.CLIENT_OPS.values(), *protocol.SERVER_OPS.values()):
        assert f"  {cls.OP}: [" in text
        for field in protocol.wire_fields(cls):
            assert f'["{field.name}", "{field.kind.name}", {str(field.required).lower()}, ' in text
