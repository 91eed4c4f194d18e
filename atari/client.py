"""Typed Atari clients: ``AtariEnv`` (blocking) and ``AsyncAtariEnv`` (asyncio)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from openenv_ws.client import AsyncEnvClient, EnvClient, StepResult
from openenv_ws.protocol import Result

from .models import AtariAction, AtariObservation, AtariState
from .options import OPTION_NAMES

if TYPE_CHECKING:
    from openenv_ws.providers import ServerProvider

__all__ = ["AsyncAtariEnv", "AtariEnv", "atari_config"]


def atari_config(**options: Any) -> dict[str, Any]:
    """The ``open`` config for the given Atari options; None means "server default"."""
    unknown = sorted(set(options) - set(OPTION_NAMES))
    if unknown:
        raise TypeError(
            f"unknown Atari option(s) {', '.join(unknown)}; known: {', '.join(OPTION_NAMES)}"
        )
    return {
        k: (list(v) if isinstance(v, tuple) else v) for k, v in options.items() if v is not None
    }


class _AtariWire:
    """The typed conversions shared by the sync and async Atari clients."""

    _core: Any

    def _legal(self) -> list[int]:
        legal = self._core.spec.extra.get("legal_actions")
        return list(legal) if legal is not None else list(range(self._core.spec.action.n))

    def _action_to_wire(self, action: Any) -> Any:
        if isinstance(action, AtariAction):
            return action.action_id
        return int(action) if hasattr(action, "__index__") and type(action) is not bool else action

    def _result_from_wire(self, frame: Result) -> StepResult[AtariObservation]:
        legal = self.__dict__.get("_legal_cache")
        if legal is None:
            legal = self.__dict__["_legal_cache"] = self._legal()
        return StepResult(
            AtariObservation.from_result(frame, legal_actions=legal),
            frame.reward,
            frame.terminated,
            frame.truncated,
            frame.done,
            frame.info,
        )

    def _state_from_wire(self, state: dict[str, Any]) -> AtariState:
        return AtariState.from_wire(state)


class AtariEnv(_AtariWire, EnvClient[AtariObservation]):
    """A typed Atari session over WebSocket.

    With no URL a local server subprocess is started (and stopped on close)::

        with AtariEnv(game="breakout") as env:          # embedded local server
            obs = env.reset(seed=0).observation
            result = env.step(AtariAction(1))

        with AtariEnv("ws://host:8000", game="pong") as env:  # a running server
            ...

    Keyword options are the Atari config (``game``, ``obs_type``, ``frameskip``,
    ``repeat_action_probability``, ``full_action_space``, ``mode``,
    ``difficulty``, ``max_episode_steps``, ``max_num_frames_per_episode``, and
    the preprocessing options ``img_height``, ``img_width``, ``stack_num``,
    ``maxpool``, ``noop_max``, ``episodic_life``, ``reward_clipping``,
    ``use_fire_reset``; None: the server's default); the rest (``token``,
    ``timeout``, ...) go to :class:`EnvClient`.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        game: str = "pong",
        obs_type: str = "rgb",
        frameskip: int | tuple[int, int] | None = None,
        repeat_action_probability: float | None = None,
        full_action_space: bool | None = None,
        mode: int | None = None,
        difficulty: int | None = None,
        max_episode_steps: int | None = None,
        max_num_frames_per_episode: int | None = None,
        img_height: int | None = None,
        img_width: int | None = None,
        stack_num: int | None = None,
        maxpool: bool | None = None,
        noop_max: int | None = None,
        episodic_life: bool | None = None,
        reward_clipping: bool | None = None,
        use_fire_reset: bool | None = None,
        **client_kwargs: Any,
    ) -> None:
        config = atari_config(
            game=game,
            obs_type=obs_type,
            frameskip=frameskip,
            repeat_action_probability=repeat_action_probability,
            full_action_space=full_action_space,
            mode=mode,
            difficulty=difficulty,
            max_episode_steps=max_episode_steps,
            max_num_frames_per_episode=max_num_frames_per_episode,
            img_height=img_height,
            img_width=img_width,
            stack_num=stack_num,
            maxpool=maxpool,
            noop_max=noop_max,
            episodic_life=episodic_life,
            reward_clipping=reward_clipping,
            use_fire_reset=use_fire_reset,
        )
        provider = None
        if url is None:
            from openenv_ws.providers.local import LocalServerProvider

            provider = LocalServerProvider().start()
            url = provider.url
        try:
            super().__init__(url, config=config, **client_kwargs)
        except BaseException:
            if provider is not None:
                provider.stop()
            raise
        self._provider = provider

    @classmethod
    def from_local(cls, **options: Any) -> AtariEnv:
        """Start a local server subprocess and open a session on it (same as no URL)."""
        return cls(None, **options)

    @classmethod
    def from_docker_image(
        cls, image: str, *, provider_options: Mapping[str, Any] | None = None, **options: Any
    ) -> AtariEnv:
        """Run `image` in a container and open a session on it.

        The server port is published on a random 127.0.0.1 port; the container
        is stopped and removed when the session closes (or if opening it fails).

        Args:
            image: a server image, e.g. built from the repository's Dockerfile.
            provider_options: keyword arguments for
                :class:`~openenv_ws.providers.DockerProvider` (``startup_timeout``,
                ``environment``, ``run_options``, ...).
            options: Atari options and client keywords, as for :class:`AtariEnv`.

        Raises:
            ServerUnavailable: no engine, no such image, or the server did not come up.
        """
        from openenv_ws.providers.docker import DockerProvider

        provider = DockerProvider(image, **dict(provider_options or {})).start()
        try:
            env = cls(provider.url, **options)
        except BaseException:
            provider.stop()
            raise
        env._provider = provider
        return env

    def state(self, **kwargs: Any) -> AtariState:
        state: AtariState = super().state(**kwargs)
        return state


class AsyncAtariEnv(_AtariWire, AsyncEnvClient[AtariObservation]):
    """The asyncio twin of :class:`AtariEnv` (a server URL, or :meth:`from_docker_image`)."""

    _provider: ServerProvider | None = None

    def __init__(
        self,
        url: str,
        *,
        game: str = "pong",
        obs_type: str = "rgb",
        **options_and_client_kwargs: Any,
    ) -> None:
        options = {
            k: options_and_client_kwargs.pop(k)
            for k in list(options_and_client_kwargs)
            if k in OPTION_NAMES
        }
        super().__init__(
            url,
            config=atari_config(game=game, obs_type=obs_type, **options),
            **options_and_client_kwargs,
        )

    @classmethod
    async def from_docker_image(
        cls, image: str, *, provider_options: Mapping[str, Any] | None = None, **options: Any
    ) -> AsyncAtariEnv:
        """Run `image` in a container and open a session on it (see
        :meth:`AtariEnv.from_docker_image`); ``await env.close()`` stops and
        removes the container, and so does a failure or a cancellation while opening.
        """
        from openenv_ws.providers.docker import DockerProvider

        provider = DockerProvider(image, **dict(provider_options or {}))
        try:
            # The engine calls block; a cancellation stops the provider, which
            # makes a start still running in its thread remove its container.
            await asyncio.to_thread(provider.start)
            env = cls(provider.url, **options)
            env._provider = provider
            await env.open()
        except BaseException:
            await asyncio.shield(asyncio.to_thread(provider.stop))
            raise
        return env

    async def close(self) -> None:
        """Close the session; a server this client started is stopped too. Idempotent."""
        try:
            await super().close()
        finally:
            provider, self._provider = self._provider, None
            if provider is not None:
                await asyncio.to_thread(provider.stop)
