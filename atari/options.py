"""The names of the Atari session options, importable without the emulator (clients use them).

:mod:`atari.config` holds their defaults, bounds and checks.
"""

from __future__ import annotations

__all__ = ["OPTION_NAMES", "PREPROCESSING_KEYS"]

#: The preprocessing options (Gymnasium's ``AtariPreprocessing`` and
#: ``FrameStackObservation``, ``AtariVectorEnv``'s names); at their defaults a
#: session plays the plain ``ALE/<Game>-v5`` environment.
PREPROCESSING_KEYS = (
    "img_height",
    "img_width",
    "stack_num",
    "maxpool",
    "noop_max",
    "episodic_life",
    "reward_clipping",
    "use_fire_reset",
)

#: Every option of an Atari session, in the order of ``DEFAULT_CONFIG``.
OPTION_NAMES = (
    "game",
    "obs_type",
    "frameskip",
    "repeat_action_probability",
    "full_action_space",
    "mode",
    "difficulty",
    "max_episode_steps",
    "max_num_frames_per_episode",
    *PREPROCESSING_KEYS,
)
