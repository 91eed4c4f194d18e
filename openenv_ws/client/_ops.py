"""The client API of one session, written once over a transport.

:class:`SessionOps` is what every single-session client shares: the facts
of the open session, the hooks typed clients override
(``_action_to_wire``, ``_result_from_wire``, ``_state_from_wire``) and the
reading of each op's reply. :class:`BlockingSession` adds the five blocking
ops (``reset``, ``step``, ``state``, ``snapshot``, ``restore``) over the
:class:`Link` it holds: a WebSocket (:class:`~openenv_ws.client.sync.SocketSession`)
or the HTTP fallback (:class:`~openenv_ws.client.http_fallback.HTTPLink`).
The asyncio client states the same ops as coroutines over the same pieces.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, Protocol, Self, TypeVar

from ..environment import EnvSpec
from ..protocol import ClientFrame, Result, ServerFrame, SnapshotData, StateReply
from ._core import DEFAULT, ClientCore, StepResult, action_value

if TYPE_CHECKING:
    from ..providers._base import ServerProvider

__all__ = ["BlockingSession", "Link", "Linked", "SessionFacts", "SessionOps", "on_local_server"]

ObsT = TypeVar("ObsT")
C = TypeVar("C")


class SessionFacts:
    """What every client tells about its open session, from its core."""

    _core: ClientCore
    timeout: float | None

    @property
    def spec(self) -> EnvSpec:
        """The session's action and observation spaces (from ``opened``)."""
        assert self._core.spec is not None, "the session is not open yet"
        return self._core.spec

    @property
    def session_id(self) -> str:
        assert self._core.session_id is not None, "the session is not open yet"
        return self._core.session_id

    @property
    def shared_memory_used(self) -> bool:
        """True when the server writes observations into shared memory (same host)."""
        return self._core.shared is not None

    @property
    def compression(self) -> str | None:
        """How observations travel (SPEC section 19), e.g. ``"zstd+delta"``; None: raw."""
        return self._core.compression

    @property
    def indexed_frames_used(self) -> bool:
        """True when the server sends RGB frames as colour codes (SPEC section 18)."""
        return self._core.palette is not None

    def _wait(self, timeout: float | None) -> float | None:
        """The seconds a call waits: its own `timeout`, or the client's default."""
        return self.timeout if timeout is DEFAULT else timeout


class SessionOps(SessionFacts, Generic[ObsT]):
    """Session facts, hooks and reply handling shared by the single-session clients."""

    # ------------------------------------------------------------------ hooks for typed clients

    def _action_to_wire(self, action: Any) -> Any:
        """Turn a user action into the wire ``action`` value (:func:`action_value`)."""
        return action_value(action)

    def _result_from_wire(self, frame: Result) -> StepResult[ObsT]:
        """Turn a ``result`` frame into the client's result type."""
        return StepResult(
            frame.obs,
            frame.reward,
            frame.terminated,
            frame.truncated,
            frame.done,
            frame.info,
        )

    def _state_from_wire(self, state: dict[str, Any]) -> Any:
        """Turn a ``state`` map into the client's state type."""
        return state

    # ------------------------------------------------------------------ replies

    def _result(self, reply: ServerFrame) -> StepResult[ObsT]:
        """The reply to ``reset``, ``step`` or ``restore``."""
        if type(reply) is not Result:
            ClientCore.expect(reply, Result)
        return self._result_from_wire(reply)  # type: ignore[arg-type]

    def _state(self, reply: ServerFrame) -> Any:
        """The reply to ``state``."""
        return self._state_from_wire(ClientCore.expect(reply, StateReply).state)

    @staticmethod
    def _snapshot(reply: ServerFrame) -> bytes:
        """The reply to ``snapshot``."""
        snap: bytes = ClientCore.expect(reply, SnapshotData).snapshot
        return snap


class Link(Protocol):
    """The blocking transport of one open session, as a client holds it."""

    url: str

    @property
    def closed(self) -> bool:
        """True once the session is closed (by either side)."""
        ...

    def roundtrip(self, frame: ClientFrame, timeout: float | None) -> ServerFrame:
        """Send `frame`, return its reply (error frames raise)."""
        ...

    def step(self, rid: int, action: Any, obs: bool, timeout: float | None) -> ServerFrame:
        """Send the step ``rid``, return its reply (the hot path: no frame object)."""
        ...

    def close(self) -> None:
        """Close the session and free the server's environment. Idempotent."""
        ...


class Linked(SessionFacts):
    """A client over a blocking :class:`Link`: its URL, its state, closing."""

    _link: Link
    #: The local server this client started (:meth:`from_local`), stopped on close.
    _provider: ServerProvider | None = None

    @property
    def url(self) -> str:
        """The server's URL this session lives on."""
        return self._link.url

    @property
    def closed(self) -> bool:
        """True once the session is closed (by either side)."""
        return self._link.closed

    def close(self) -> None:
        """Close the session and free the server's environment. Idempotent."""
        self._link.close()
        provider, self._provider = self._provider, None
        if provider is not None:
            provider.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BlockingSession(SessionOps[ObsT], Linked):
    """The five ops of a blocking client, over its :class:`Link`."""

    @classmethod
    def from_local(cls, *, config: Mapping[str, Any] | None = None, **kwargs: Any) -> Self:
        """Start a local server subprocess and open a session on it.

        The server stops when this client is closed.
        """
        return on_local_server(lambda url: cls(url, config=config, **kwargs))  # type: ignore[call-arg]

    def reset(
        self,
        *,
        seed: int | None = None,
        episode_id: str | None = None,
        options: Mapping[str, Any] | None = None,
        timeout: float | None = DEFAULT,
    ) -> StepResult[ObsT]:
        """Start a new episode (deterministic for a given seed)."""
        frame = self._core.reset_frame(seed, episode_id, options)
        return self._result(self._link.roundtrip(frame, self._wait(timeout)))

    def step(
        self, action: Any, *, obs: bool = True, timeout: float | None = DEFAULT
    ) -> StepResult[ObsT]:
        """Advance one step; with ``obs=False`` the observation is left out (None)."""
        reply = self._link.step(
            self._core.next_id(),
            self._action_to_wire(action),
            obs,
            self.timeout if timeout is DEFAULT else timeout,
        )
        if type(reply) is Result:
            return self._result_from_wire(reply)
        return self._result(reply)

    def state(self, *, timeout: float | None = DEFAULT) -> Any:
        """The episode state (episode_id, step_count and environment details)."""
        return self._state(self._link.roundtrip(self._core.state_frame(), self._wait(timeout)))

    def snapshot(self, *, timeout: float | None = DEFAULT) -> bytes:
        """An opaque snapshot of the running episode, for :meth:`restore`."""
        return self._snapshot(
            self._link.roundtrip(self._core.snapshot_frame(), self._wait(timeout))
        )

    def restore(self, snapshot: bytes, *, timeout: float | None = DEFAULT) -> StepResult[ObsT]:
        """Continue the episode from `snapshot`; returns the observation there."""
        frame = self._core.restore_frame(snapshot)
        return self._result(self._link.roundtrip(frame, self._wait(timeout)))


def on_local_server(open_client: Callable[[str], C]) -> C:
    """Start a local server, open a client on its URL; the client stops it on close."""
    from ..providers.local import LocalServerProvider

    provider = LocalServerProvider().start()
    try:
        client = open_client(provider.url)
    except BaseException:
        provider.stop()
        raise
    client._provider = provider  # type: ignore[attr-defined]  # BlockingSession's
    return client
