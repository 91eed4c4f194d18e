"""One server-side session, sans-I/O: a request in, its reply (and maybe a close) out.

Two entry points serve the same logic: :meth:`ServerSession.handle` takes the
bytes of a WebSocket message and returns the reply's bytes (a plain step is
read and written without building frame objects: the step loop);
:meth:`ServerSession.serve` takes a frame object and returns one (the HTTP
fallback and OpenEnv's dialect, which read and write other formats).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from ..._shm import ServerRegion, Slot
from ...environment import EnvFactory, Environment, EnvResult
from ...errors import EnvConfigError, InvalidState, OpenEnvError, ProtocolError
from ...footprint import DEFAULT_FOOTPRINT, Footprint, session_footprint
from ...protocol import (
    ERRORS,
    SUPPORTED_VERSIONS,
    ClientFrame,
    Close,
    Closed,
    Error,
    GetState,
    Open,
    Opened,
    Reset,
    Restore,
    Result,
    Send,
    SessionMachine,
    SessionState,
    Snapshot,
    SnapshotData,
    StateReply,
    Step,
    decode_client_frame,
    encode,
    encode_result,
    error_frame,
    parse_step,
)
from ...spaces import plain
from ...wire.compress import ObsPacker, choose, mode_name
from ..runtime.offload import Worker, close_quietly
from .replay import ReplayCache
from .replies import (
    CloseRequest,
    FrameReply,
    Reply,
    ResultFields,
    encoded,
    obs_layout,
    result_fields,
)
from .vector_envs import VectorSession, check_num_envs, open_vector

__all__ = ["ServerSession"]

logger = logging.getLogger("openenv_ws.server")


_NORMAL_CLOSE = CloseRequest(1000, "session closed")


class ServerSession:
    """The state of one session: its environment, its state machine and its counters.

    Args:
        env_factory: makes the environment from the ``open`` config.
        max_frame_size: largest request frame accepted, in bytes.
        admit: called on ``open`` with this session; returns an error code
            (e.g. ``capacity``) and message to refuse it, or None to admit it.
        release: called once with this session when an admitted session ends.
        abandoned: called when a call of the session misses its deadline and
            keeps running (see :meth:`abandon`); `release` follows once it returns.
        compression: codecs the server may compress observations with, preferred
            first (SPEC section 19); empty: never.
        allow_delta: delta frames may be chosen (False where replies can be lost
            without the server knowing, as on HTTP).
        byte_counts: where compressed sessions add up their raw and sent
            observation bytes, per mode (for ``/metrics``).
        max_envs: the most envs a vector session (an ``open`` with
            ``num_envs``, SPEC section 21) may hold.

    When the session ends, its environment is closed, or handed to the
    factory's ``give_back(config, env)`` if it has one (a
    :class:`~openenv_ws.server.runtime.pool.WarmPool` does) and the environment never
    raised an unexpected error.

    A session whose environment is not :attr:`~openenv_ws.environment.Environment.inline`
    has its requests served on a worker thread by
    :func:`openenv_ws.server.session.calls.call`; while one is (:attr:`busy`),
    closing it and replacing its shared region wait until that call returns.

    An ``open`` with ``num_envs`` makes a vector session (SPEC section 21):
    its environment is a :class:`~.vector_envs.VectorSession`, which answers
    every request but ``open`` and ``close``; the step loop never sees it.
    """

    __slots__ = (
        "_abandoned",
        "_admit",
        "_admitted",
        "_broken",
        "_byte_counts",
        "_closing",
        "_config",
        "_factory",
        "_give_back",
        "_into",
        "_max_envs",
        "_max_frame_size",
        "_next_shared",
        "_prebuilt",
        "_release",
        "_worker",
        "busy",
        "compression",
        "env",
        "footprint",
        "inline",
        "machine",
        "packer",
        "palette",
        "peer",
        "replay",
        "resume_token",
        "session_id",
        "shared",
        "single",
        "steps",
        "vector",
        "weight",
    )

    def __init__(
        self,
        env_factory: EnvFactory,
        *,
        max_frame_size: int,
        admit: Callable[[ServerSession], tuple[str, str] | None] | None = None,
        release: Callable[[ServerSession], None] | None = None,
        abandoned: Callable[[ServerSession], None] | None = None,
        compression: Sequence[str] = (),
        allow_delta: bool = True,
        byte_counts: dict[str, list[int]] | None = None,
        max_envs: int = 64,
    ) -> None:
        self._factory = env_factory
        self._give_back: Callable[[dict[str, Any], Environment], None] | None = getattr(
            env_factory, "give_back", None
        )
        self._config: dict[str, Any] = {}
        self._broken = False  # the environment raised an unexpected error: never reuse it
        self._max_frame_size = max_frame_size
        self._admit = admit
        self._release = release
        self._abandoned = abandoned
        self._admitted = False
        #: What the session hosts: its environment, or its envs (:attr:`vector`); None
        #: until it is open.
        self.env: Environment | VectorSession | None = None
        #: The environment of a single session (None for a vector session).
        self.single: Environment | None = None
        self.machine = SessionMachine()
        self.session_id = uuid.uuid4().hex
        self.steps = 0
        #: Sent in ``opened`` when the server offers resumption (see server/supervisor.py).
        self.resume_token: str | None = None
        #: The palette of indexed observations (SPEC section 18); None: full colour.
        self.palette: bytes | None = None
        #: The client's shared region for observations (SPEC section 17), if any.
        self.shared: ServerRegion | None = None
        #: Codecs this server compresses observations with, preferred first, and
        #: whether delta frames are allowed (SPEC section 19; not over HTTP).
        self.compression = (tuple(compression), allow_delta)
        self._byte_counts = byte_counts
        #: Compresses the observations sent inline when the session chose a codec.
        self.packer: ObsPacker | None = None
        # (shape, dtype) of the observations the environment writes into shared
        # memory itself (one tuple, passed to the region as is); () if it cannot;
        # None until known.
        self._into: tuple[Any, ...] | None = None
        #: Requests may be served inline (on the caller's thread): the environment's
        #: calls are bounded. False until the session is open (an open may have to
        #: wait for its turn to build, see :mod:`openenv_ws.server.session.pacing`).
        self.inline = False
        #: A request is being served on the worker thread.
        self.busy = False
        self._worker: Worker | None = None
        self._prebuilt: Environment | BaseException | None = None
        self._closing = False  # close once the call in progress returns
        self._next_shared: list[ServerRegion | None] = []  # a region to use after it
        #: The last request and its reply, for a client that sends it again (None: not kept).
        self.replay: ReplayCache | None = None
        self._max_envs = max_envs
        #: The session's envs when it is a vector session (then also :attr:`env`).
        self.vector: VectorSession | None = None
        #: Sessions' worth of capacity it takes: its envs (1 for a single session).
        self.weight = 1
        #: Memory and engine threads it is charged (SPEC section 9), set on ``open``.
        self.footprint: Footprint = DEFAULT_FOOTPRINT
        #: The client's address, set by the transport before ``open`` (per-peer
        #: quotas, ``max_sessions_per_peer``); None: unknown, not counted per peer.
        self.peer: str | None = None

    # ------------------------------------------------------------------ entry points

    def handle(self, data: bytes) -> Reply:
        """Serve one request message; return the encoded reply and an optional close."""
        replay = self.replay
        if replay is not None and replay.armed:
            kept: Reply | None = replay.recall(data)
            if kept is not None:
                return kept
        # The step loop: a step of a running episode is read without a full decode (a
        # vector session's episodes are its own: its machine never says RUNNING).
        step = (
            parse_step(data)
            if self.machine.state is SessionState.RUNNING and len(data) <= self._max_frame_size
            else None
        )
        out: Reply
        if step is not None:
            try:
                out = encode_result(step[0], *self._advance(step[1], step[2])), None
            except Exception as exc:  # noqa: BLE001 - any failure of the environment is answered
                out = encoded(self._failure(step[0], "step", exc))
        else:
            try:
                frame = decode_client_frame(data, max_frame_size=self._max_frame_size)
            except ProtocolError as exc:
                out = encoded(self.error(getattr(exc, "request_id", None), exc.code, str(exc)))
            else:
                reply, close = self._answer(frame)
                try:
                    out = encode(reply), close
                except ProtocolError as exc:  # a value of the environment the wire cannot carry
                    out = encoded(self._failure(frame.id, frame.OP, exc))
        if replay is not None:  # replay.keep(data, out), without the call: the step loop
            replay.request = data
            replay.reply = out
        return out

    def serve(self, frame: ClientFrame) -> FrameReply:
        """Serve one request frame; return the reply frame and an optional close."""
        replay = self.replay
        kept: FrameReply | None = (
            replay.recall(frame) if replay is not None and replay.armed else None
        )
        if kept is not None:
            return kept
        out = self._answer(frame)
        if replay is not None:
            replay.keep(frame, out)
        return out

    def refuse(
        self, code: str, message: str, *, request_id: int | None = None
    ) -> tuple[Error, CloseRequest]:
        """A fatal error: unsolicited (text frame, idle timeout, shutdown) or to `request_id`."""
        reply, close = self.error(request_id, code, message)
        assert close is not None
        return reply, close

    def error(self, rid: int | None, code: str, message: str) -> tuple[Error, CloseRequest | None]:
        """The ``error`` frame answering request `rid`, and the close a fatal code asks for."""
        frame = error_frame(rid, code, message)
        if not frame.fatal:
            return frame, None
        close_code = ERRORS[code].close_code or 1011
        # Close reasons are limited to 123 bytes by RFC 6455.
        reason = message.encode()[:120].decode(errors="ignore")
        return frame, CloseRequest(close_code, reason)

    # ------------------------------------------------------------------ worker thread

    def worker(self) -> Worker:
        """The thread (and lock) serving this session's requests when it is not inline."""
        if self._worker is None:
            self._worker = Worker()
        return self._worker

    def open_for_calls(self) -> bool:
        """Whether a request may still be served (not closed, nor closing)."""
        return not self._closing and self.machine.state is not SessionState.CLOSED

    def settle(self) -> None:
        """The call on the worker thread returned: do what waited for it."""
        self.busy = False
        if self._next_shared:
            self.use_shared(self._next_shared.pop())
        if self._closing:
            self.close()

    def abandon(self) -> None:
        """The call in progress missed its deadline: the environment is never used again.

        It is closed (not reused) once the call returns; until then the session
        is *stuck*: out of the session count, its footprint still charged
        (``SessionRegistry.abandoned``; ``max_stuck_calls`` bounds them).
        """
        self._broken = True
        self._closing = True
        if self._abandoned is not None:
            self._abandoned(self)

    def use_shared(self, region: ServerRegion | None) -> None:
        """Send observations through `region` from now on (None: inline)."""
        if self.busy:  # the worker thread may be writing into the current region
            self._next_shared[:] = [region]
            if region is not None:
                region.owner = self
            return
        old, self.shared = self.shared, region
        self._into = None
        if region is not None:
            region.owner = self
        if old is not None and old is not region:
            old.close()

    def close(self) -> None:
        """Free the environment and the session's slot; safe to call more than once.

        While a call runs on the worker thread, this happens when it returns.
        """
        if self.busy:
            self._closing = True
            return
        self.inline = False
        for region in self._next_shared:
            if region is not None and region is not self.shared:
                region.close()
        self._next_shared.clear()
        self.use_shared(None)
        self.machine.closed()
        env, single, self.env, self.single = self.env, self.single, None, None
        worker = self._worker
        if env is not None and env is self.vector and worker is not None:
            # A vector engine's teardown (its threads, its envs) is work too: on the thread.
            self.vector = None
            env = None if worker.discard(env) else env
        if worker is not None:
            worker.stop()
        if env is not None:
            give_back = self._give_back
            try:
                if give_back is not None and not self._broken and single is not None:
                    give_back(self._config, single)
                else:
                    env.close()
            except Exception:
                logger.exception("session %s: environment close failed", self.session_id)
        self._leave()

    @property
    def state(self) -> SessionState:
        return self.machine.state

    # ------------------------------------------------------------------ dispatch

    def _answer(self, frame: ClientFrame) -> FrameReply:
        try:
            return self._dispatch(frame)
        except Exception as exc:  # noqa: BLE001 - any failure of the environment is answered
            return self._failure(frame.id, frame.OP, exc)

    def _failure(self, rid: int | None, op: str, exc: Exception) -> FrameReply:
        """The reply to a request whose serving raised `exc`."""
        if isinstance(exc, OpenEnvError):
            return self.error(rid, exc.code if exc.code in ERRORS else "internal", str(exc))
        self._broken = True
        logger.exception("session %s: environment failed on '%s'", self.session_id, op)
        return self.error(
            rid,
            "internal",
            f"the environment failed on '{op}' ({type(exc).__name__}: {exc}); "
            "the session is closed, open a new one",
        )

    def _dispatch(self, frame: ClientFrame) -> FrameReply:
        vector = self.vector
        if vector is not None and type(frame) is not Open and type(frame) is not Close:
            return vector.dispatch(self, frame), None
        machine = self.machine
        machine.check(frame.OP)
        env = self.single
        match frame:
            case Step(id=rid, action=action, obs=want_obs):
                return Result(rid, *self._advance(action, want_obs)), None
            case Reset(id=rid, seed=seed, episode_id=episode_id, options=options):
                assert env is not None
                result = env.reset(seed=seed, episode_id=episode_id, options=options)
                done = result.terminated or result.truncated
                machine.served("reset", done=done)
                return Result(rid, *self._fields(result, done, key=True)), None
            case GetState(id=rid):
                assert env is not None
                return StateReply(id=rid, state=env.state()), None
            case Open():
                return self.serve_open(frame)
            case Snapshot(id=rid):
                assert env is not None
                return SnapshotData(id=rid, snapshot=env.snapshot()), None
            case Restore(id=rid, snapshot=blob):
                assert env is not None
                result = env.restore(blob)
                done = result.terminated or result.truncated
                machine.served("restore", done=done)
                return Result(rid, *self._fields(result, done, key=True)), None
            case Close(id=rid):
                machine.served("close")
                return Closed(id=rid), _NORMAL_CLOSE
            case Send():
                raise InvalidState(
                    "'send' is for vector sessions (an open with num_envs); "
                    + ("send 'open' first" if env is None else "step this session with 'step'"),
                    code="unsupported" if env is not None else "not_open",
                )
        raise ProtocolError(f"op '{frame.OP}' has no handler", code="unknown_op")

    def _advance(self, action: Any, want_obs: bool) -> ResultFields:
        """Step the environment; the fields of the ``result`` (observation maybe in place)."""
        env = self.single
        assert env is not None
        shared = self.shared
        slot = None
        if shared is not None and want_obs:
            into = self._into
            if into is None:
                into = self._into = obs_layout(env, self.palette is not None)
            if into:
                slot = shared.reserve(into)
        if slot is None:
            result = env.step(action, obs=want_obs)
        else:  # the observation is written straight into shared memory
            result = env.step(action, obs=True, out=slot.view)  # type: ignore[call-arg]
        self.steps += 1
        done = result.terminated or result.truncated
        if done:  # a step that does not end the episode leaves the state as it is
            self.machine.served("step", done=True)
        return self._fields(result, done, slot=slot)

    def _fields(
        self, result: EnvResult, done: bool, *, slot: Slot | None = None, key: bool = False
    ) -> ResultFields:
        """The fields of a ``result`` after its id; `key`: a compressed observation
        is a key frame (after reset and restore)."""
        packer = self.packer
        if key and packer is not None:
            packer.key()
        return result_fields(result, done, self.shared, slot, packer)

    def open_refusal(self, frame: Open) -> tuple[str, str] | None:
        """Why :meth:`serve_open` would refuse `frame` before building an environment
        (code, message), or None. Sets :attr:`weight` and :attr:`footprint`."""
        if frame.version not in SUPPORTED_VERSIONS:
            supported = ", ".join(map(str, SUPPORTED_VERSIONS))
            return (
                "unsupported_version",
                f"protocol version {frame.version} is not supported; this server speaks {supported}",
            )
        try:
            num_envs = frame.num_envs
            self.weight = 1 if num_envs is None else check_num_envs(num_envs, self._max_envs)
            batch = frame.batch_size if frame.batch_size is not None else num_envs
            self.footprint = session_footprint(self._factory, frame.config, num_envs, batch)
        except EnvConfigError as exc:
            return exc.code, str(exc)
        return None

    def reserve(self, frame: Open) -> bool:
        """Admit the open of a vector session before its envs are built (off the event
        loop): its :attr:`weight` (env count) and :attr:`footprint` are known from
        `frame`. False: not admitted, and :meth:`serve_open` refuses `frame` as it is,
        without building anything. Released as any admitted session is (when it
        closes, or its open fails)."""
        assert frame.num_envs is not None
        try:
            self.machine.check(frame.OP)
        except OpenEnvError:
            return False
        if self.open_refusal(frame) is not None:
            return False
        if self._admit is not None:
            if self._admit(self) is not None:
                return False
            self._admitted = True
        return True

    def prebuilt(self, outcome: Environment | BaseException) -> None:
        """The environment the next open gets (built off the event loop), or what building
        it raised; :meth:`drop_prebuilt` closes one no open took."""
        self._prebuilt = outcome

    def drop_prebuilt(self) -> None:
        found, self._prebuilt = self._prebuilt, None
        if found is not None and not isinstance(found, BaseException):
            close_quietly(found)

    def _build(self, config: dict[str, Any]) -> Environment:
        found, self._prebuilt = self._prebuilt, None
        if isinstance(found, BaseException):
            raise found
        return self._factory(config) if found is None else found

    def _build_vector(self, frame: Open) -> VectorSession:
        """The envs built for `frame` off the event loop (see :meth:`reserve`), or built now."""
        found, self._prebuilt = self._prebuilt, None
        if isinstance(found, BaseException):
            raise found
        if found is None:
            return open_vector(self._factory, frame)
        assert isinstance(found, VectorSession)
        return found

    def serve_open(self, frame: Open) -> FrameReply:
        """Serve ``open``: admit the session and build its environment."""
        refused = ServerSession.open_refusal(self, frame)
        if refused is not None:
            return self.error(frame.id, *refused)
        if self._admit is not None and not self._admitted:  # else admitted by reserve()
            refusal = self._admit(self)
            if refusal is not None:
                return self.error(frame.id, *refusal)
            self._admitted = True
        self._config = dict(frame.config)
        try:
            if frame.num_envs is None:
                self.env = self.single = self._build(dict(frame.config))
            else:  # a vector session's envs are never pooled
                self.env = self.vector = self._build_vector(frame)
                self._give_back = None
        except BaseException:
            self._leave()
            raise
        if not frame.structured:
            self._plain_only()
        self.inline = bool(getattr(self.env, "inline", False))
        if frame.palette and self.single is not None:
            self.palette = self.single.indexed_frames()
        preference, allow_delta = self.compression
        codec, delta = choose(frame.compress, frame.delta, preference, allow_delta=allow_delta)
        if codec is not None:
            counts = self._byte_counts
            self.packer = ObsPacker(
                codec,
                delta,
                None
                if counts is None
                else counts.setdefault(mode_name(codec, delta) or "", [0, 0]),
            )
        self.machine.served("open")
        return self.opened_reply(frame.id), None

    def _plain_only(self) -> None:
        """Refuse, for a client that reads no structured values (SPEC section 22), an
        environment whose spaces it cannot read; the session stays connected."""
        env = self.env
        assert env is not None
        spec = env.spec
        if plain(spec.observation, spec.action):
            return
        single, self.env, self.vector, self.single = self.single, None, None, None
        give_back = self._give_back
        if give_back is not None and single is not None:
            give_back(self._config, single)
        else:
            env.close()
        self._leave()
        raise EnvConfigError(
            f"this environment's spaces (observation: {spec.observation.to_wire()['type']}, "
            f"action: {spec.action.to_wire()['type']}) need a client that reads structured "
            "values (protocol section 22, 'structured: true' in open); upgrade the client"
        )

    def opened_reply(self, rid: int) -> Opened:
        """The ``opened`` of this open session (also sent again on resume)."""
        assert self.env is not None
        packer = self.packer
        return Opened(
            id=rid,
            session_id=self.session_id,
            spec=self.env.spec.to_wire(),
            resume_token=self.resume_token,
            palette=self.palette,
            compress=None if packer is None else packer.codec,
            delta=packer is not None and packer.delta,
        )

    def _leave(self) -> None:
        if self._admitted:
            self._admitted = False
            if self._release is not None:
                self._release(self)
