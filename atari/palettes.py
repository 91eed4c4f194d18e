"""The colour palettes of ALE's screens, for indexed frames (SPEC section 18).

ALE's screen is one byte per pixel, a colour code of the console, and
``getScreenRGB`` looks each code up in the palette of the ROM's TV system:
NTSC for most games, PAL for a few. An even code is a colour; the odd code
after it is that colour's luminance as a grey, round(0.2989 R + 0.587 G +
0.114 B), as ALE computes it.

The tables hold the 128 colours of each system, measured from ALE's own
frames (``getScreen`` against ``getScreenRGB``) while playing every bundled
game; ``tests/atari/test_palettes.py`` plays every game again and checks that
its palette turns its codes into ALE's RGB frame, pixel for pixel.
"""

from __future__ import annotations

import functools
import math

__all__ = ["NTSC_GAMES", "PAL_GAMES", "palette_of", "system_palette"]

# The 128 colours of codes 0, 2, ..., 254 as RGB hex triples.
_NTSC = (
    "0000004a4a4a6f6f6f8e8e8eaaaaaac0c0c0d6d6d6ececec48480069690f86861da2a22abbbb35d2d240e8e84afcfc54"
    "7c2c00904811a26221b47a30c3903dd2a44adfb755ecc860901c00a33915b55328c66c3ad5824ae39759f0aa67fcbc74"
    "940000a71a1ab83232c84848d65c5ce46f6ff08080fc909084006497197aa8308fb846a2c659b3d46cc3e07cd2ec8ce0"
    "50008468199a7d30ad9246c0a459d0b56ce0c57ceed48cfc140090331aa34e32b56848c67f5cd5956fe3a980f0bc90fc"
    "000094181aa72d32b84248c8545cd6656fe47580f08490fc001c88183b9d2d57b04272c2548ad265a0e175b5ef84c8fc"
    "0030641850802d6d984288b054a0c565b7d975cceb84e0fc00403018624e2d8169429e8254b89965d1ae75e7c284fcd4"
    "0044001a661a32843248a0485cba5c6fd26f80e88090fc90143c00355f18527e2d6e9c4287b7549ed065b4e775c8fc84"
    "3038005059166d762b88923ea0ab4fb7c25fccd86ee0ec7c482c00694d14866a26a28638bb9f47d2b656e8cc63fce070"
)
_PAL = (
    "0000002b2b2b525252767676979797b6b6b6d2d2d2ececec0000002b2b2b525252767676979797b6b6b6d2d2d2ececec"
    "80580096711aab8732be9c48cfaf5cdfc06feed180fce090445c005e791a7693328cac48a0c25cb3d76fc4ea80d4fc90"
    "70340089511aa06b32b68448c99a5cdcaf6fecc280fcd4900064141a803532985248b06e5cc5876fd99e80ebb490fcc8"
    "700014891a35a03252b6486ec95c87dc6f9eec80b4fc90c8005c5c1a7676328e8e48a4a45cb8b86fcbcb80dcdc90ecec"
    "70005c841a74963289a8489eb75cb0c66fc1d380d1e090e0003c70195a892f75a0448eb657a5c968badc79ceec88e0fc"
    "5800706e1a898332a09648b6a75cc9b76fdcc680ecd490fc002070193f892f5aa04474b6578bc968a1dc79b5ec88c8fc"
    "3400804a1a965f32ab7248be835ccf936fdfa280eeb090fc0000881a1a9d3232b04848c25c5cd26f6fe18080ef9090fc"
    "0000002b2b2b525252767676979797b6b6b6d2d2d2ececec0000002b2b2b525252767676979797b6b6b6d2d2d2ececec"
)

#: Bundled games whose ROM ALE shows in PAL colours.
PAL_GAMES = frozenset(
    {
        "adventure",
        "air_raid",
        "keystone_kapers",
        "king_kong",
        "klax",
        "laser_gates",
        "mr_do",
        "pacman",
        "sir_lancelot",
        "space_war",
    }
)
#: Bundled games whose ROM ALE shows in NTSC colours.
NTSC_GAMES = frozenset(
    {
        "alien",
        "amidar",
        "assault",
        "asterix",
        "asteroids",
        "atlantis",
        "atlantis2",
        "backgammon",
        "bank_heist",
        "basic_math",
        "battle_zone",
        "beam_rider",
        "berzerk",
        "blackjack",
        "bowling",
        "boxing",
        "breakout",
        "carnival",
        "casino",
        "centipede",
        "chopper_command",
        "crazy_climber",
        "crossbow",
        "darkchambers",
        "defender",
        "demon_attack",
        "donkey_kong",
        "double_dunk",
        "earthworld",
        "elevator_action",
        "enduro",
        "entombed",
        "et",
        "fishing_derby",
        "flag_capture",
        "freeway",
        "frogger",
        "frostbite",
        "galaxian",
        "gopher",
        "gravitar",
        "hangman",
        "haunted_house",
        "hero",
        "human_cannonball",
        "ice_hockey",
        "jamesbond",
        "journey_escape",
        "kaboom",
        "kangaroo",
        "koolaid",
        "krull",
        "kung_fu_master",
        "lost_luggage",
        "mario_bros",
        "miniature_golf",
        "montezuma_revenge",
        "ms_pacman",
        "name_this_game",
        "othello",
        "phoenix",
        "pitfall",
        "pitfall2",
        "pong",
        "pooyan",
        "private_eye",
        "qbert",
        "riverraid",
        "road_runner",
        "robotank",
        "seaquest",
        "skiing",
        "solaris",
        "space_invaders",
        "star_gunner",
        "superman",
        "surround",
        "tennis",
        "tetris",
        "tic_tac_toe_3d",
        "time_pilot",
        "trondead",
        "turmoil",
        "tutankham",
        "up_n_down",
        "venture",
        "video_checkers",
        "video_chess",
        "video_cube",
        "video_pinball",
        "wizard_of_wor",
        "word_zapper",
        "yars_revenge",
        "zaxxon",
    }
)


@functools.cache
def system_palette(system: str) -> bytes:
    """The 768-byte palette (256 RGB triples, by colour code) of ``"ntsc"`` or ``"pal"``."""
    colours = bytes.fromhex({"ntsc": _NTSC, "pal": _PAL}[system])
    out = bytearray()
    for i in range(0, len(colours), 3):
        r, g, b = colours[i : i + 3]
        grey = math.floor(r * 0.2989 + g * 0.5870 + b * 0.1140 + 0.5)
        out += bytes((r, g, b, grey, grey, grey))
    return bytes(out)


def palette_of(game: str) -> bytes | None:
    """The palette ALE shows `game` in; None for a game not measured here."""
    if game in NTSC_GAMES:
        return system_palette("ntsc")
    if game in PAL_GAMES:
        return system_palette("pal")
    return None
