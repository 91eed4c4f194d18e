"""GameMonitor: SB3's episode statistics from real games (unclipped, per game, not per life)."""

from __future__ import annotations

from typing import Any

import numpy as np
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import VecMonitor

from openenv_ws.sb3 import GameMonitor, RemoteVecEnv
from openenv_ws.server import ServerThread

CONFIG = {
    "game": "breakout",
    "obs_type": "grayscale",
    "img_height": 42,
    "img_width": 42,
    "noop_max": 30,
    "episodic_life": True,
    "reward_clipping": True,
    "use_fire_reset": True,
    "repeat_action_probability": 0.0,
}


def play(env: Any, n: int) -> tuple[list[dict[str, Any]], list[float], int]:
    """Random steps until every env has ended one game: the episode statistics reported,
    the raw return of each env's first game, the number of per-life episodes seen."""
    env.seed(3)
    env.reset()
    rng = np.random.default_rng(3)
    raw = np.zeros(n)
    games: list[float | None] = [None] * n
    reported: list[dict[str, Any]] = []
    lives_ended = 0
    while any(g is None for g in games):
        _, rewards, dones, infos = env.step(rng.integers(0, 4, n))
        for i, info in enumerate(infos):
            assert rewards[i] == np.sign(info["reward"])
            raw[i] += info["reward"]
            lives_ended += int(dones[i])
            if "episode" in info and games[i] is None:
                reported.append(info["episode"])
                games[i] = raw[i]
                assert info["terminated"]  # the real game over
    return reported, [float(g) for g in games if g is not None], lives_ended


def test_statistics_are_per_game_and_unclipped(atari_server: ServerThread) -> None:
    env = GameMonitor(RemoteVecEnv(atari_server.url, 2, config=CONFIG))
    reported, games, lives_ended = play(env, 2)
    env.close()
    assert [e["r"] for e in reported] == sorted(games, key=lambda g: games.index(g))
    assert lives_ended >= 2 * 5  # five lives a game, each its own episode for the agent
    assert all(e["l"] % 4 == 0 and e["l"] >= 4 * 5 * 20 for e in reported)  # frames, 5 lives


def test_vec_monitor_alone_counts_lives_and_clipped_rewards(atari_server: ServerThread) -> None:
    """What GameMonitor is for: SB3's VecMonitor sees one episode per life."""
    env = VecMonitor(RemoteVecEnv(atari_server.url, 2, config=CONFIG))
    env.seed(3)
    env.reset()
    rng = np.random.default_rng(3)
    episodes = []
    while len(episodes) < 6:
        *_, infos = env.step(rng.integers(0, 4, 2))
        episodes += [info for info in infos if "episode" in info]
    env.close()
    assert not all(info["terminated"] for info in episodes)


def test_ppo_logs_games(atari_server: ServerThread) -> None:
    env = GameMonitor(RemoteVecEnv(atari_server.url, 2, config=CONFIG))
    model = PPO("MlpPolicy", env, n_steps=384, batch_size=128, n_epochs=1, seed=0, device="cpu")
    model.learn(768)
    env.close()
    assert len(model.ep_info_buffer) >= 1
    assert all(info["l"] >= 300 for info in model.ep_info_buffer)  # five lives of frames
