"""Autoreset of vector environments, as Gymnasium's ``AutoresetMode``: the modes and
what each does when an env's episode ends, for the clients and the server alike.

- ``"next_step"``: the step after an episode's last one resets that env (its
  action is ignored; the row shows the new episode's first observation,
  reward 0 and flags false);
- ``"same_step"``: the ending step resets the env at once; its row shows the
  new episode's first observation with the ending step's reward and flags, the
  last observation and info are handed over beside it (``final_obs``);
- ``"disabled"`` (vector clients of single sessions only): nothing happens;
  the user resets ended envs before stepping them again.

:class:`Autoreset` keeps, per env, what the mode asks for next; the vector
client of single sessions (:mod:`openenv_ws.client.vector`) and the server's
serial vector environment (:mod:`openenv_ws.server.session.serial`) both step by it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["AUTORESET_MODES", "SESSION_AUTORESET_MODES", "Autoreset", "parse_autoreset_mode"]

#: Every mode, by its name in ``gymnasium.vector.AutoresetMode`` in lower case.
AUTORESET_MODES = ("next_step", "same_step", "disabled")
#: The modes of a vector session (its ``autoreset_mode`` config key, SPEC section 21):
#: a server resets its envs itself.
SESSION_AUTORESET_MODES = AUTORESET_MODES[:2]

# Gymnasium's spellings of the modes (``AutoresetMode`` values), in lower case.
_SPELLINGS = {"nextstep": "next_step", "samestep": "same_step"}


def parse_autoreset_mode(value: Any, allowed: Sequence[str] = AUTORESET_MODES) -> str:
    """`value` (a mode's name, or a ``gymnasium.vector.AutoresetMode``) as one of `allowed`.

    Raises:
        ValueError: naming the modes allowed.
    """
    mode = str(getattr(value, "value", value)).lower()
    mode = _SPELLINGS.get(mode, mode)
    if mode not in allowed:
        names = [repr(m) for m in allowed]
        listed = f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else names[0]
        raise ValueError(
            f"autoreset_mode must be {listed} (or a gymnasium.vector.AutoresetMode), got {value!r}"
        )
    return mode


class Autoreset:
    """What `mode` asks of each of `num_envs` envs after its last result.

    Args:
        mode: one of :data:`AUTORESET_MODES`.
        num_envs: the envs.
    """

    __slots__ = ("_due", "_now", "mode")

    def __init__(self, mode: str, num_envs: int) -> None:
        self.mode = mode
        self._now = mode == "same_step"
        self._due = [False] * num_envs if mode == "next_step" else []

    def ended(self, env: int, done: bool) -> bool:
        """Take env `env`'s latest result (`done`: its episode ended; a reset's
        result is never done); True when the env resets at once (same-step
        mode). In next-step mode an end makes the env's next step a reset
        (:meth:`step_is_reset`) until a result that is not done."""
        if self._due:
            self._due[env] = done
        return done and self._now

    def step_is_reset(self, env: int) -> bool:
        """True when env `env`'s next step is to be a reset instead (next-step mode,
        after an end)."""
        return bool(self._due) and self._due[env]
