"""The session's protocol state shared by every client, sans-I/O.

Every client (sync, async, HTTP, and each env of a vector client) keeps one
:class:`ClientCore`: it builds the request frames of the six ops with fresh
ids, decodes replies (the C reader for plain results, the Python codec for the
rest, colour codes expanded, shared-memory arrays taken out of the region),
recognises the reply to a request (discarding late replies to requests that
timed out), turns error frames into exceptions and keeps what ``opened``
said. The clients only move bytes (:mod:`openenv_ws.client._ops` holds
the ops' reply handling and the hooks).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit

import numpy as np

from .. import palette as palette_mod
from .._arrays import check_bools
from .._hosts import is_loopback
from .._shm import (
    DEFAULT_SIZE,
    EXT_SHARED,
    MAX_SIZE,
    MIN_SHARED_BYTES,
    ClientRegion,
    readonly_copy,
    shared_memory_supported,
)
from .._shm import FIRST_PAGE as SHM_FIRST_PAGE
from .._shm import HEADER as SHM_HEADER
from ..environment import ArraySpec, EnvSpec
from ..errors import AuthError, OpenEnvError, ProtocolError, RemoteEnvError, SessionClosed
from ..protocol import (
    ERRORS,
    MAX_ID,
    PROTOCOL_VERSION,
    STRUCTURED,
    Close,
    Error,
    GetState,
    Open,
    Opened,
    Reset,
    Restore,
    Result,
    Send,
    ServerFrame,
    Snapshot,
    SnapshotData,
    StateReply,
    Step,
    decode_field,
    decode_server_frame,
    ext_hook,
    native_wire,
    shared_ext_hook,
)
from ..spaces import Space, SpaceError, array_bytes
from ..wire.compress import ObsUnpacker, available_codecs, mode_name
from ..wire.decode import compressed_ext_hook

__all__ = ["DEFAULT", "ClientCore", "StepResult", "action_value", "check_observation_bytes"]

ObsT = TypeVar("ObsT")

#: Marker for "use the client's default timeout" (None disables the timeout).
DEFAULT: Any = type("_Default", (), {"__repr__": lambda self: "DEFAULT"})()

TOKEN_ENV = "OPENENV_WS_TOKEN"
# Fatal errors the server sends on its own (id nil): the session ends, no request failed.
logger = logging.getLogger("openenv_ws.client")
_SESSION_ENDINGS = frozenset({"idle_timeout", "shutting_down"})
# Shared region bytes a vector session offers per env: two batches of 84x84x4
# frame stacks or of 210x160 RGB frames, with room to spare.
_REGION_PER_ENV = 1 << 20


def action_value(action: Any) -> Any:
    """A user action as a wire value: a numpy integer becomes an int, a Pydantic model
    (an OpenEnv ``Action`` such as ``CallToolAction``) its ``model_dump()``."""
    if isinstance(action, np.integer):
        return int(action)
    pydantic = sys.modules.get("pydantic")  # loaded by whoever made a model; never by us
    if pydantic is not None and isinstance(action, pydantic.BaseModel):
        return action.model_dump()
    return action


def _in_place(view: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return view


def on_this_host(url: str) -> bool:
    """Whether `url` names this host by a loopback name or address."""
    return is_loopback(urlsplit(url).hostname)


def compression_offer(url: str, compression: str | Sequence[str] | None) -> list[str]:
    """The codecs ``open`` lists for a client's `compression` argument (SPEC section 19).

    ``"auto"``: every codec this installation has, when the server is not on
    a loopback address (on this host shared memory or a plain copy is cheaper);
    a codec name or a list of them: those; None or ``"none"``: none.

    Raises:
        ValueError: an unknown codec name, or one this installation lacks.
    """
    if compression is None or compression == "none":
        return []
    if compression == "auto":
        return [] if on_this_host(url) else list(available_codecs())
    names = [compression] if isinstance(compression, str) else list(compression)
    have = available_codecs()
    for name in names:
        if name not in have:
            raise ValueError(
                f"compression {name!r} is not available; use 'auto', None or one of "
                f"{', '.join(map(repr, have))}"
            )
    return names


def check_observation_bytes(space: Space, rows: int, limit: int) -> None:
    """Refuse observations of `space`, `rows` per reply (a batch), that would hold more
    than `limit` bytes (the client's ``max_frame_size``, SPEC section 9), before
    anything is allocated for them: a server's shapes are its word, the limit is
    the client's.

    Raises:
        ProtocolError: naming both sizes and the option to raise.
    """
    per_obs = array_bytes(space)
    total = per_obs * rows
    if total > limit:
        each = f"batch ({rows} observations of {per_obs})" if rows > 1 else "reply"
        raise ProtocolError(
            f"the server declared observations of {total} bytes per {each}, over "
            f"this client's limit of {limit} bytes; raise the client's max_frame_size "
            "if such observations are expected"
        )


@dataclass(slots=True)
class StepResult(Generic[ObsT]):
    """What ``reset``, ``step`` and ``restore`` return.

    Attributes:
        observation: the observation (a read-only numpy array for the generic
            client; typed clients put their observation model here), or None
            when the step asked for no observation.
        reward: reward of this step (sum over skipped frames for Atari).
        terminated: the episode reached a terminal state.
        truncated: the episode was cut by a time or frame limit.
        done: ``terminated or truncated``.
        info: extra per-step data (for Atari: lives, episode_frame_number, frame_number).
    """

    observation: ObsT
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)


class ClientCore:
    """Ids, reply matching and error mapping for one session."""

    __slots__ = (
        "_ext_hook",
        "_indexed",
        "_next_id",
        "_offer",
        "batch_size",
        "closed_error",
        "config",
        "max_frame_size",
        "num_envs",
        "palette",
        "resume_token",
        "session_id",
        "shared",
        "spec",
        "token",
        "unpacker",
        "want_delta",
        "want_palette",
    )

    def __init__(
        self,
        config: Mapping[str, Any],
        *,
        token: str | None,
        max_frame_size: int,
        indexed_frames: bool | None = None,
    ) -> None:
        self.config = dict(config)
        self.token = token if token is not None else os.environ.get(TOKEN_ENV)
        self.max_frame_size = max_frame_size
        self.session_id: str | None = None
        self.spec: EnvSpec | None = None
        self.resume_token: str | None = None
        self.closed_error: SessionClosed | None = None
        self._next_id = 0
        #: The shared region offered to the server (SPEC section 17), if any.
        self.shared: ClientRegion | None = None
        self._ext_hook: Callable[[int, bytes], Any] = ext_hook
        #: Whether ``open`` asks for indexed frames (SPEC section 18).
        self.want_palette = palette_mod.NATIVE if indexed_frames is None else bool(indexed_frames)
        #: The session's palette when the server sends indexed frames.
        self.palette: bytes | None = None
        self._indexed: tuple[int, ...] | None = None  # the shape of indexed observations
        self._offer: list[str] = []  # codecs ``open`` lists (SPEC section 19)
        #: Whether ``open`` accepts delta frames.
        self.want_delta = False
        #: Decompresses the session's observations when the server chose a codec.
        self.unpacker: ObsUnpacker | None = None
        #: A vector session's ``open`` fields (SPEC section 21); None: a single session.
        #: Its batches are copied into the client's buffer as they are decoded, so
        #: arrays in the shared region are handed over in place, not copied.
        self.num_envs: int | None = None
        self.batch_size: int | None = None

    def offer_compression(
        self, url: str, compression: str | Sequence[str] | None, delta: bool
    ) -> None:
        """Set what ``open`` offers: the codecs of :func:`compression_offer` and, with
        them, delta frames if `delta`."""
        self._offer = compression_offer(url, compression)
        self.want_delta = bool(delta and self._offer)

    @property
    def compression(self) -> str | None:
        """How the session's observations travel: e.g. ``"zstd+delta"``; None: uncompressed."""
        unpacker = self.unpacker
        return None if unpacker is None else mode_name(unpacker.codec, unpacker.delta)

    def _set_hook(self) -> None:
        """The extension hook for what the session has: a shared region, a codec."""
        shared = self.shared
        hook: Callable[[int, bytes], Any]
        if shared is None:
            hook = ext_hook
        elif self.num_envs is not None:
            hook = shared_ext_hook(shared, _in_place)
        else:
            hook = shared_ext_hook(shared, self._from_region if self._indexed is not None else None)
        if self.unpacker is not None:
            hook = compressed_ext_hook(self.unpacker, hook)
        self._ext_hook = hook

    def offer_shared_memory(self, url: str, wanted: bool) -> None:
        """Offer a shared region for observations if `wanted` and the server is on this host.

        The server uses it only if it can map it (same host, same user); if not,
        observations travel inline as usual.
        """
        if not wanted or self.shared is not None or not shared_memory_supported():
            return
        if not on_this_host(url):
            return
        # Two batches of vector observations fit (the two halves of the region); a
        # half never holds more than the client accepts in a reply (SPEC section 9).
        size = DEFAULT_SIZE if self.num_envs is None else self.num_envs * _REGION_PER_ENV
        size = min(max(size, DEFAULT_SIZE), MAX_SIZE, SHM_FIRST_PAGE + 2 * self.max_frame_size)
        if size < SHM_FIRST_PAGE + 2 * MIN_SHARED_BYTES:
            return  # (what fits such a limit travels inline anyway)
        try:
            self.shared = ClientRegion(size)
        except OSError as exc:  # out of descriptors or memory: the socket still works
            logger.debug("no shared region for observations: %s", exc)
            return
        self._set_hook()

    def handshake_answered(self, headers: Mapping[str, str], *, keep_descriptor: bool) -> bool:
        """Take the server's answer to the shared-memory offer; True if it uses the region.

        A refused region is freed. A used one keeps its descriptor only when
        a later connection (a resumption) may offer it again.
        """
        shared = self.shared
        if shared is None:
            return False
        if headers.get(SHM_HEADER) != "ok":
            self.release()
            return False
        if not keep_descriptor:
            shared.drop_descriptor()
        return True

    def release(self) -> None:
        """Free the shared region (the client is closed)."""
        shared, self.shared = self.shared, None
        self._set_hook()
        if shared is not None:
            shared.close()

    def next_id(self) -> int:
        self._next_id = (self._next_id + 1) & MAX_ID
        return self._next_id

    def open_frame(self, *, resume: bool = False) -> Open:
        """The ``open`` of a new session, or (`resume`) the one that asks for this one back."""
        return Open(
            id=self.next_id(),
            version=PROTOCOL_VERSION,
            config=self.config,
            token=self.token,
            resume=self.resume_token if resume else None,
            palette=self.want_palette and not resume,
            compress=[] if resume else self._offer,
            delta=self.want_delta and not resume,
            num_envs=None if resume else self.num_envs,
            batch_size=None if resume else self.batch_size,
            structured=True,
        )

    def reset_frame(
        self, seed: int | None, episode_id: str | None, options: Mapping[str, Any] | None
    ) -> Reset:
        return Reset(
            id=self.next_id(), seed=seed, episode_id=episode_id, options=dict(options or {})
        )

    def step_frame(self, action: Any, obs: bool) -> Step:
        return Step(id=self.next_id(), action=action, obs=obs)

    def send_frame(self, actions: Any, env_ids: Any) -> Send:
        """A vector session's ``send`` (SPEC section 21): `actions` for the envs
        `env_ids` of the last batch (None: in its row order)."""
        return Send(id=self.next_id(), action=actions, env_ids=env_ids, obs=True)

    def state_frame(self) -> GetState:
        return GetState(id=self.next_id())

    def snapshot_frame(self) -> Snapshot:
        return Snapshot(id=self.next_id())

    def restore_frame(self, snapshot: bytes) -> Restore:
        return Restore(id=self.next_id(), snapshot=bytes(snapshot))

    def close_frame(self) -> Close:
        return Close(id=self.next_id())

    def headers(self) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        if self.shared is not None and self.shared.fd >= 0:
            headers[SHM_HEADER] = self.shared.offer()
        return headers

    def decode(self, data: memoryview | bytes) -> ServerFrame:
        """The server frame in `data`; an indexed observation comes back expanded to RGB."""
        if native_wire is not None and len(data) <= self.max_frame_size:
            fields = native_wire.parse_result(data)  # a plain result, or None
            if fields is not None:
                return self.native_result(fields)
        frame = decode_server_frame(
            data, max_frame_size=self.max_frame_size, ext_hook=self._ext_hook
        )
        if self._indexed is not None and type(frame) is Result and frame.obs is not None:
            frame.obs = self._expand_codes(frame.obs)
        return frame

    def native_result(self, fields: tuple[Any, ...]) -> Result:
        """The ``result`` whose fields the C reader returned (``native_wire.parse_result``
        or ``BlockingWebSocket.exchange``), as :meth:`decode` makes it."""
        _, rid, ext_type, payload, reward, terminated, truncated, done, info = fields
        obs: Any
        if ext_type == STRUCTURED:  # its MessagePack bytes (SPEC section 22)
            obs = decode_field(payload, Result, "obs", rid, self._ext_hook)
        else:
            obs = None if payload is None else self._ext_hook(ext_type, payload)
            if obs is not None and ext_type != EXT_SHARED and self._indexed is not None:
                obs = self._expand_codes(obs)  # (the region's hook expands codes itself)
        return Result(rid, obs, reward, terminated, truncated, done, info)

    def _expand_codes(self, obs: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        rgb = self._colours(obs)
        return obs if rgb is None else rgb

    def _colours(self, arr: np.ndarray[Any, Any]) -> np.ndarray[Any, Any] | None:
        """`arr` expanded to RGB (read-only) if it holds the session's colour codes, else None."""
        if arr.shape != self._indexed or arr.dtype != np.uint8:
            return None
        assert self.palette is not None
        rgb = palette_mod.expanded(arr, self.palette)
        rgb.flags.writeable = False
        return rgb

    def _from_region(self, view: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """An observation in the shared region: colour codes expanded straight from
        it, anything else copied out."""
        rgb = self._colours(view)
        if rgb is not None:
            return rgb
        out = readonly_copy(view)
        check_bools(out)  # (the copy: the server may write the region again meanwhile)
        return out

    @staticmethod
    def is_reply(rid: int, frame: ServerFrame) -> bool:
        """True if `frame` answers request `rid`; False for a late reply to an earlier one."""
        return frame.id == rid or (frame.id is None and isinstance(frame, Error))

    def check(self, frame: ServerFrame) -> ServerFrame:
        """Raise for an error frame; remember fatal ones so later calls say why."""
        if isinstance(frame, Error):
            error: OpenEnvError = RemoteEnvError(
                frame.code, frame.message, fatal=frame.fatal, request_id=frame.id
            )
            if frame.fatal:
                info = ERRORS.get(frame.code)
                self.closed_error = SessionClosed(
                    info.close_code if info else None, f"the server ended the session: {error}"
                )
                if frame.id is None and frame.code in _SESSION_ENDINGS:
                    # Not an answer to the request: the session ended under it.
                    raise self.closed_error
            if frame.code == "auth":
                error = AuthError(f"the server refused the credentials: {frame.message}")
            raise error
        return frame

    def _answer_to_open(self, frame: ServerFrame) -> Opened:
        frame = self.check(frame)
        if not isinstance(frame, Opened):
            raise ProtocolError(f"expected 'opened' in answer to 'open', got '{frame.OP}'")
        return frame

    def resumed(self, frame: ServerFrame) -> None:
        """Check the answer to ``open_frame(resume=True)`` (raises what the server refused)."""
        frame = self._answer_to_open(frame)
        if frame.session_id != self.session_id:
            raise ProtocolError(
                f"the server resumed session {frame.session_id}, not {self.session_id}"
            )

    def opened(self, frame: ServerFrame) -> Opened:
        """Take the answer to ``open_frame()``: the session's spec, palette and resume token."""
        frame = self._answer_to_open(frame)
        try:
            spec = EnvSpec.from_wire(frame.spec)
        except SpaceError as exc:
            raise ProtocolError(f"the server's 'opened' spec is malformed: {exc}") from None
        indexed = None
        if frame.palette is not None:
            obs = spec.observation
            if isinstance(obs, ArraySpec) and obs.dtype == "uint8":
                indexed = palette_mod.indexed_shape(obs.shape)
            if indexed is None:
                raise ProtocolError(
                    f"the server sent a palette, but its observations ({obs}) are not "
                    "uint8 RGB arrays of shape (..., 3)"
                )
        self._check_size(spec)
        unpacker = self._unpacker_for(frame, spec)
        self.session_id = frame.session_id
        self.spec = spec
        self.resume_token = frame.resume_token
        self.palette = frame.palette
        self._indexed = indexed  # (colour codes in the region are expanded from it)
        self.unpacker = unpacker
        self._set_hook()
        return frame

    @property
    def rows(self) -> int:
        """Observations in one reply: a vector session's batch size, else 1."""
        return self.batch_size or self.num_envs or 1

    def _check_size(self, spec: EnvSpec) -> None:
        check_observation_bytes(spec.observation, self.rows, self.max_frame_size)

    def _unpacker_for(self, frame: Opened, spec: EnvSpec) -> ObsUnpacker | None:
        """The decompressor of the codec `frame` chose (None: none), checked against the offer."""
        if frame.compress is None:
            if frame.delta:
                raise ProtocolError("the server sent 'delta: true' without a codec")
            return None
        if frame.compress not in self._offer:
            raise ProtocolError(
                f"the server chose compression {frame.compress!r}, which this client did not "
                f"offer (it offered {self._offer or 'none'})"
            )
        if frame.delta and not self.want_delta:
            raise ProtocolError("the server chose delta frames, which this client did not offer")
        # A reply's observations decompress to at most what the spec declares (one per
        # row of a vector session's batch) and never to more than the client's limit.
        obs = spec.observation
        limit = self.max_frame_size
        if isinstance(obs, ArraySpec):
            limit = min(limit, array_bytes(obs) * self.rows)
        return ObsUnpacker(frame.compress, frame.delta, limit)

    @staticmethod
    def expect(
        frame: ServerFrame, kind: type[Result] | type[StateReply] | type[SnapshotData]
    ) -> Any:
        if not isinstance(frame, kind):
            raise ProtocolError(f"expected '{kind.OP}' reply, got '{frame.OP}'")
        return frame
