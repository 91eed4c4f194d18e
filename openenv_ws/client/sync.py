"""The synchronous client: one WebSocket, one remote environment instance."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np

from ..environment import EnvSpec
from ..errors import InvalidState, SessionClosed
from ..protocol import (
    Close,
    GetState,
    Reset,
    Restore,
    Result,
    ServerFrame,
    Snapshot,
    SnapshotData,
    StateReply,
    Step,
    encode,
)
from ._core import DEFAULT, ClientCore, StepResult, result_of
from ._ws import BlockingWebSocket, normalize_url

if TYPE_CHECKING:
    from ..providers import ServerProvider

__all__ = ["EnvClient"]

ObsT = TypeVar("ObsT")


class EnvClient(Generic[ObsT]):
    """A session with a remote environment over one WebSocket (blocking).

    Example::

        with EnvClient("ws://127.0.0.1:8000", config={"game": "pong"}) as env:
            result = env.reset(seed=0)
            result = env.step(1)

    Args:
        url: the server (``ws://host:port``, ``http://host:port`` or ``host:port``;
            the path defaults to ``/ws``).
        config: the environment configuration sent in ``open``.
        token: bearer token, if the server requires one (default: the
            ``OPENENV_WS_TOKEN`` environment variable).
        open_timeout: seconds to connect and open the session (None: no limit).
        timeout: default seconds to wait for each reply (None: no limit).
        max_frame_size: largest reply accepted, in bytes.
        busy_poll: seconds to spin before sleeping while waiting for a reply
            (0: never spin). Spinning costs client CPU and saves the kernel's
            wake-up latency, which dominates step latency on some VMs.

    Raises:
        ServerUnavailable: nothing answers at `url`.
        AuthError: the server refused the token.
        RemoteEnvError: the server refused the configuration (code ``bad_config``).
    """

    def __init__(
        self,
        url: str,
        *,
        config: Mapping[str, Any] | None = None,
        token: str | None = None,
        open_timeout: float | None = 30.0,
        timeout: float | None = 60.0,
        max_frame_size: int = 64 << 20,
        busy_poll: float = 0.0,
    ) -> None:
        self.url = normalize_url(url)
        self.timeout = timeout
        self._core = ClientCore(config or {}, token=token, max_frame_size=max_frame_size)
        self._provider: ServerProvider | None = None
        self._ws: BlockingWebSocket | None = None
        self._ws = BlockingWebSocket(
            self.url,
            open_timeout=open_timeout,
            headers=self._core.headers(),
            max_size=max_frame_size,
            busy_poll=busy_poll,
        )
        try:
            self._core.opened(self._request(self._core.open_frame(), open_timeout))
        except BaseException:
            self._ws.close()
            raise

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_local(
        cls, *, config: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> EnvClient[Any]:
        """Start a local server subprocess and open a session on it.

        The server stops when this client is closed.
        """
        from ..providers.local import LocalServerProvider

        provider = LocalServerProvider().start()
        try:
            client = cls(provider.url, config=config, **kwargs)
        except BaseException:
            provider.stop()
            raise
        client._provider = provider
        return client

    # ------------------------------------------------------------------ properties

    @property
    def spec(self) -> EnvSpec:
        """The session's action and observation spaces (from ``opened``)."""
        assert self._core.spec is not None
        return self._core.spec

    @property
    def session_id(self) -> str:
        assert self._core.session_id is not None
        return self._core.session_id

    @property
    def closed(self) -> bool:
        return self._ws is None or self._ws.closed

    # ------------------------------------------------------------------ requests

    def _request(self, frame: Any, timeout: float | None) -> ServerFrame:
        ws = self._ws
        if ws is None or ws.closed:
            raise self._closed_error()
        rid = frame.id
        ws.send(encode(frame))
        decode = self._core.decode
        try:
            while True:
                reply = ws.recv(decode, timeout=timeout)
                if self._core.is_reply(rid, reply):
                    break
        except SessionClosed as exc:
            raise self._core.closed_error or exc from None
        return self._core.check(reply)

    def _closed_error(self) -> Exception:
        if self._core.closed_error is not None:
            return self._core.closed_error
        ws = self._ws
        if ws is not None and ws.close_code not in (None, 1000):
            return SessionClosed(ws.close_code, ws.close_reason)
        return InvalidState(
            "the client is closed; create a new one to open another session", code="closed"
        )

    def reset(
        self,
        *,
        seed: int | None = None,
        episode_id: str | None = None,
        options: Mapping[str, Any] | None = None,
        timeout: float | None = DEFAULT,
    ) -> StepResult[ObsT]:
        """Start a new episode (deterministic for a given seed)."""
        frame = Reset(
            id=self._core.next_id(), seed=seed, episode_id=episode_id, options=dict(options or {})
        )
        reply = self._request(frame, self.timeout if timeout is DEFAULT else timeout)
        return self._result_from_wire(ClientCore.expect(reply, Result))

    def step(
        self, action: Any, *, obs: bool = True, timeout: float | None = DEFAULT
    ) -> StepResult[ObsT]:
        """Advance one step; with ``obs=False`` the observation is left out (None)."""
        frame = Step(id=self._core.next_id(), action=self._action_to_wire(action), obs=obs)
        reply = self._request(frame, self.timeout if timeout is DEFAULT else timeout)
        if type(reply) is not Result:
            ClientCore.expect(reply, Result)
        return self._result_from_wire(reply)  # type: ignore[arg-type]

    def state(self, *, timeout: float | None = DEFAULT) -> Any:
        """The episode state (episode_id, step_count and environment details)."""
        reply = self._request(
            GetState(id=self._core.next_id()), self.timeout if timeout is DEFAULT else timeout
        )
        return self._state_from_wire(ClientCore.expect(reply, StateReply).state)

    def snapshot(self, *, timeout: float | None = DEFAULT) -> bytes:
        """An opaque snapshot of the running episode, for :meth:`restore`."""
        reply = self._request(
            Snapshot(id=self._core.next_id()), self.timeout if timeout is DEFAULT else timeout
        )
        snap: bytes = ClientCore.expect(reply, SnapshotData).snapshot
        return snap

    def restore(self, snapshot: bytes, *, timeout: float | None = DEFAULT) -> StepResult[ObsT]:
        """Continue the episode from `snapshot`; returns the observation there."""
        reply = self._request(
            Restore(id=self._core.next_id(), snapshot=bytes(snapshot)),
            self.timeout if timeout is DEFAULT else timeout,
        )
        return self._result_from_wire(ClientCore.expect(reply, Result))

    def close(self) -> None:
        """Close the session and free the server's environment. Idempotent."""
        ws = self._ws
        if ws is not None and not ws.closed:
            try:
                self._request(Close(id=self._core.next_id()), 5.0)
                ws.recv(self._core.decode, timeout=5.0)  # returns by the server's close frame
            except Exception:  # noqa: BLE001 - closing is best effort; the socket goes anyway
                pass
            ws.close()
        if self._provider is not None:
            self._provider.stop()
            self._provider = None

    def __enter__(self) -> EnvClient[ObsT]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        ws = getattr(self, "_ws", None)
        if ws is not None and not ws.closed:
            ws.close(timeout=0.5)

    # ------------------------------------------------------------------ hooks for typed clients

    def _action_to_wire(self, action: Any) -> Any:
        """Turn a user action into the wire ``action`` value."""
        if isinstance(action, np.integer):
            return int(action)
        return action

    def _result_from_wire(self, frame: Result) -> StepResult[ObsT]:
        """Turn a ``result`` frame into the client's result type."""
        return result_of(frame)  # type: ignore[return-value]

    def _state_from_wire(self, state: dict[str, Any]) -> Any:
        """Turn a ``state`` map into the client's state type."""
        return state
