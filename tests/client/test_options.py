"""The clients' options are declared once (:mod:`openenv_ws.client.options`): the
keywords each client takes, their defaults, and unknown keywords refused."""

from __future__ import annotations

import dataclasses

import pytest

from openenv_ws.client import (
    AsyncEnvClient,
    EnvClient,
    HTTPEnvClient,
    VectorEnvClient,
    VectorSessionClient,
)
from openenv_ws.client.options import (
    BlockingOptions,
    ClientOptions,
    SessionOptions,
    TransportOptions,
)

# Nothing listens here: every case below fails before connecting.
NOWHERE = "ws://127.0.0.1:9"


def test_the_keywords_and_the_resolved_options_name_the_same_options() -> None:
    fields = {f.name for f in dataclasses.fields(ClientOptions)}
    assert fields == BlockingOptions.__optional_keys__
    assert TransportOptions.__optional_keys__ < SessionOptions.__optional_keys__
    assert SessionOptions.__optional_keys__ | {"busy_poll"} == BlockingOptions.__optional_keys__


def test_given_options_override_the_client_defaults_which_override_the_common_ones() -> None:
    opts = ClientOptions.of("C", {"timeout": 5.0}, open_timeout=60.0, timeout=1.0)
    assert (opts.timeout, opts.open_timeout, opts.delta) == (5.0, 60.0, True)
    assert ClientOptions.of("C", {"resume": False}).resume_seconds == 0.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.timeout = 1.0  # type: ignore[misc]


@pytest.mark.parametrize(
    "make, keyword",
    [
        (lambda **kw: EnvClient(NOWHERE, **kw), "bogus"),
        (lambda **kw: VectorEnvClient(NOWHERE, 2, **kw), "bogus"),
        (lambda **kw: VectorSessionClient(NOWHERE, 2, **kw), "bogus"),
        (lambda **kw: AsyncEnvClient(NOWHERE, **kw), "busy_poll"),
        (lambda **kw: HTTPEnvClient("http://127.0.0.1:9", **kw), "delta"),
    ],
)
def test_a_keyword_a_client_does_not_take_is_refused_by_name(make: object, keyword: str) -> None:
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{keyword}'"):
        make(**{keyword: 1})  # type: ignore[operator]


def test_tls_options_are_checked_before_connecting() -> None:
    with pytest.raises(ValueError, match="ca_file or ssl_context, not both"):
        EnvClient("wss://127.0.0.1:9", ca_file="x.pem", ssl_context=object())  # type: ignore[arg-type]
