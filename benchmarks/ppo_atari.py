"""PPO on Atari with EnvPool's construction, on EnvPool or on openenv-ws: the same code.

In the style of CleanRL's ``ppo_atari_envpool.py`` (one file, Nature CNN,
clipped PPO with GAE, EnvPool's ``episodic_life`` and ``reward_clip``, episode
statistics of real games from ``info["reward"]`` and ``info["terminated"]``);
only the line that picks the module differs between the backends::

    python -m benchmarks.ppo_atari --backend envpool     --env-id Breakout-v5 --total-timesteps 20000
    python -m benchmarks.ppo_atari --backend openenv-ws  --env-id Breakout-v5 --total-timesteps 20000

``openenv-ws`` starts a local server (``openenv_ws.envpool.make`` without a
url) or uses ``--url``. Each finished game prints ``global_step`` and its
return; the run ends with the steps per second, and ``--out`` writes a JSON
summary (returns, lengths, SPS).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from dataclasses import dataclass
from typing import Any

import gymnasium
import numpy as np
import torch
from torch import nn


@dataclass(frozen=True)
class Args:
    backend: str
    env_id: str
    url: str | None
    seed: int
    total_timesteps: int
    num_envs: int
    num_steps: int
    learning_rate: float
    gamma: float
    gae_lambda: float
    num_minibatches: int
    update_epochs: int
    clip_coef: float
    ent_coef: float
    vf_coef: float
    max_grad_norm: float
    threads: int
    out: str | None


def parse(argv: list[str] | None = None) -> Args:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=("envpool", "openenv-ws"), default="openenv-ws")
    p.add_argument("--env-id", default="Breakout-v5")
    p.add_argument("--url", default=None, help="openenv-ws server (default: start a local one)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--total-timesteps", type=int, default=20_000)
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--num-steps", type=int, default=128)
    p.add_argument("--learning-rate", type=float, default=2.5e-4)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--gae-lambda", type=float, default=0.95)
    p.add_argument("--num-minibatches", type=int, default=4)
    p.add_argument("--update-epochs", type=int, default=4)
    p.add_argument("--clip-coef", type=float, default=0.1)
    p.add_argument("--ent-coef", type=float, default=0.01)
    p.add_argument("--vf-coef", type=float, default=0.5)
    p.add_argument("--max-grad-norm", type=float, default=0.5)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--out", default=None, help="write a JSON summary here")
    return Args(**vars(p.parse_args(argv)))


class GameStatistics(gymnasium.Wrapper):  # type: ignore[type-arg]
    """Returns and lengths of real games: raw rewards (``info["reward"]``), a game ends at
    ``info["terminated"]`` or a truncation, not at a lost life."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self.num_envs = env.num_envs
        # EnvPool's spaces are one env's.
        self.single_action_space = env.action_space
        self.single_observation_space = env.observation_space
        self.returns = np.zeros(self.num_envs)
        self.lengths = np.zeros(self.num_envs, np.int64)

    def reset(self, **kwargs: Any) -> Any:
        self.returns[:] = 0
        self.lengths[:] = 0
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.returns += info["reward"]
        self.lengths += 1
        over = info["terminated"].astype(bool) | truncated
        info["game_return"] = np.where(over, self.returns, np.nan)
        info["game_length"] = np.where(over, self.lengths, 0)
        self.returns[over] = 0
        self.lengths[over] = 0
        return obs, reward, terminated, truncated, info


def make_envs(args: Args) -> Any:
    if args.backend == "envpool":
        import envpool
    else:
        import openenv_ws.envpool as envpool  # the one line that changes

    extra = {"url": args.url} if args.backend == "openenv-ws" and args.url else {}
    envs = envpool.make(
        args.env_id,
        env_type="gymnasium",
        num_envs=args.num_envs,
        episodic_life=True,
        reward_clip=True,
        seed=args.seed,
        **extra,
    )
    return GameStatistics(envs)


def layer(module: nn.Module, std: float = float(np.sqrt(2)), bias: float = 0.0) -> nn.Module:
    nn.init.orthogonal_(module.weight, std)  # type: ignore[arg-type]
    nn.init.constant_(module.bias, bias)  # type: ignore[arg-type]
    return module


class Agent(nn.Module):
    """The Nature CNN trunk with a policy head and a value head."""

    def __init__(self, actions: int) -> None:
        super().__init__()
        self.trunk = nn.Sequential(
            layer(nn.Conv2d(4, 32, 8, stride=4)),
            nn.ReLU(),
            layer(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
            layer(nn.Linear(64 * 7 * 7, 512)),
            nn.ReLU(),
        )
        self.policy = layer(nn.Linear(512, actions), std=0.01)
        self.value = layer(nn.Linear(512, 1), std=1.0)

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        return self.trunk(obs / 255.0)

    def get_value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.value(self.features(obs))

    def act(
        self, obs: torch.Tensor, action: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        hidden = self.features(obs)
        dist = torch.distributions.Categorical(logits=self.policy(hidden))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.value(hidden)


def train(args: Args) -> dict[str, Any]:
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    envs = make_envs(args)
    n_actions = int(envs.single_action_space.n)
    agent = Agent(n_actions)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    n, steps = args.num_envs, args.num_steps
    batch = n * steps
    minibatch = batch // args.num_minibatches
    updates = max(args.total_timesteps // batch, 1)
    obs_buf = torch.zeros((steps, n, *envs.single_observation_space.shape), dtype=torch.uint8)
    act_buf = torch.zeros((steps, n), dtype=torch.long)
    logp_buf = torch.zeros((steps, n))
    rew_buf = torch.zeros((steps, n))
    done_buf = torch.zeros((steps, n))
    val_buf = torch.zeros((steps, n))

    games: list[tuple[int, float, int]] = []
    global_step = 0
    start = time.time()
    obs_np, _ = envs.reset()
    obs = torch.as_tensor(obs_np)
    done = torch.zeros(n)
    for update in range(1, updates + 1):
        for group in optimizer.param_groups:
            group["lr"] = (1.0 - (update - 1.0) / updates) * args.learning_rate
        for t in range(steps):
            global_step += n
            obs_buf[t], done_buf[t] = obs, done
            with torch.no_grad():
                action, logp, _, value = agent.act(obs.float())
            act_buf[t], logp_buf[t], val_buf[t] = action, logp, value.flatten()
            obs_np, reward, term, trunc, info = envs.step(action.numpy())
            rew_buf[t] = torch.as_tensor(reward, dtype=torch.float32)
            obs = torch.as_tensor(obs_np)
            done = torch.as_tensor(term | trunc, dtype=torch.float32)
            for i in np.flatnonzero(~np.isnan(info["game_return"])):
                ret, length = float(info["game_return"][i]), int(info["game_length"][i])
                games.append((global_step, ret, length))
                print(f"global_step={global_step}, episodic_return={ret}", flush=True)

        with torch.no_grad():
            next_value = agent.get_value(obs.float()).flatten()
            advantages = torch.zeros_like(rew_buf)
            last = torch.zeros(n)
            for t in reversed(range(steps)):
                nonterminal = 1.0 - (done if t == steps - 1 else done_buf[t + 1])
                following = next_value if t == steps - 1 else val_buf[t + 1]
                delta = rew_buf[t] + args.gamma * following * nonterminal - val_buf[t]
                last = delta + args.gamma * args.gae_lambda * nonterminal * last
                advantages[t] = last
            returns = advantages + val_buf

        b_obs = obs_buf.reshape(batch, *obs_buf.shape[2:])
        b_act, b_logp = act_buf.reshape(-1), logp_buf.reshape(-1)
        b_adv, b_ret, b_val = advantages.reshape(-1), returns.reshape(-1), val_buf.reshape(-1)
        for _ in range(args.update_epochs):
            order = torch.randperm(batch)
            for lo in range(0, batch, minibatch):
                idx = order[lo : lo + minibatch]
                _, logp, entropy, value = agent.act(b_obs[idx].float(), b_act[idx])
                ratio = (logp - b_logp[idx]).exp()
                adv = b_adv[idx]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                policy_loss = torch.max(
                    -adv * ratio, -adv * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)
                ).mean()
                value = value.flatten()
                clipped = b_val[idx] + (value - b_val[idx]).clamp(-args.clip_coef, args.clip_coef)
                value_loss = (
                    0.5 * torch.max((value - b_ret[idx]) ** 2, (clipped - b_ret[idx]) ** 2).mean()
                )
                loss = policy_loss - args.ent_coef * entropy.mean() + args.vf_coef * value_loss
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()
        sps = int(global_step / (time.time() - start))
        print(f"update {update}/{updates} global_step={global_step} SPS={sps}", flush=True)

    envs.close()
    elapsed = time.time() - start
    summary = {
        "backend": args.backend,
        "env_id": args.env_id,
        "num_envs": n,
        "global_step": global_step,
        "seconds": round(elapsed, 1),
        "sps": round(global_step / elapsed, 1),
        "games": len(games),
        "game_returns": [r for _, r, _ in games],
        "mean_return": round(float(np.mean([r for _, r, _ in games])), 2) if games else None,
        "mean_length_steps": round(float(np.mean([k for *_, k in games])), 1) if games else None,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "game_returns"}), flush=True)
    return summary


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    summary = train(args)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
