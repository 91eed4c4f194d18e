"""The web page in real headless Chromium (Debian's), driven by Playwright.

The page is loaded from a live server, opens its own session over ``/ws`` and
is played with the keyboard. What it draws is checked pixel for pixel against
the same environment run in-process with the same seed and actions.

Chromium comes from ``.ci/lib/chromium.sh`` (``.ci/run`` calls it); without it
these tests skip locally and fail in CI.
"""

from __future__ import annotations

import base64
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from atari import atari_factory, games
from openenv_ws.server import ServerThread, create_app
from openenv_ws.testing import fake_factory

from ..conftest import UNIT

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed: pip install -e '.[test]'"
)

CHROMIUM = Path("/usr/bin/chromium")
# Headless, as root without a sandbox, and off the network: this machine
# reaches no other host, and the page must need none.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
]
TIMEOUT_MS = 30_000 * UNIT
# Keys pressed, the action each must send and its name; Breakout's minimal
# actions are 0 NOOP, 1 FIRE, 2 RIGHT, 3 LEFT.
BREAKOUT_KEYS = [
    ("Space", 1, "FIRE"),
    ("ArrowRight", 2, "RIGHT"),
    ("ArrowRight", 2, "RIGHT"),
    ("ArrowLeft", 3, "LEFT"),
]
# Where to also write the screenshot (the README's is made this way).
SCREENSHOT_ENV = "OPENENV_WS_WEB_SCREENSHOT"


@pytest.fixture(scope="module")
def browser_context(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A fresh Chromium profile for this module's pages."""
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        pytest.skip(
            f"Chromium is not installed at {CHROMIUM}: run `bash .ci/lib/chromium.sh` "
            "(Debian's chromium and chromium-driver) to run the browser tests"
        )
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_api.sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            headless=True,
            args=FLAGS,
            viewport={"width": 1280, "height": 800},
        )
        context.set_default_timeout(TIMEOUT_MS)
        try:
            yield context
        finally:
            context.close()


class PageRun:
    """One page on a server, with everything it requested and every script error.

    Scripts run in the page are passed as functions, never bare expressions:
    the page's Content-Security-Policy forbids eval.
    """

    def __init__(self, context: Any, base_url: str) -> None:
        self.base_url = base_url
        self.page = context.new_page()
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)

    def open(self, query: str = "") -> None:
        self.page.goto(f"{self.base_url}/{query}")
        self.page.wait_for_selector("body[data-ready='true']")

    def text(self, element_id: str) -> str:
        return str(self.page.locator(f"#{element_id}").inner_text())

    def wait_text(self, element_id: str, expected: str) -> None:
        self.page.wait_for_function(
            "([id, want]) => document.getElementById(id).textContent === want",
            arg=[element_id, expected],
        )

    def wait_number_above(self, element_id: str, floor: float) -> None:
        self.page.wait_for_function(
            "([id, floor]) => Number(document.getElementById(id).textContent) > floor",
            arg=[element_id, floor],
        )

    def canvas(self) -> np.ndarray:
        """The canvas' own pixels (not the scaled rendering), as an (h, w, 4) uint8 array."""
        got = self.page.evaluate(
            """() => {
                const c = document.getElementById('screen');
                const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
                let text = '';
                for (let i = 0; i < px.length; i += 8192) {
                    text += String.fromCharCode(...px.subarray(i, i + 8192));
                }
                return {w: c.width, h: c.height, b64: btoa(text)};
            }"""
        )
        raw = base64.b64decode(got["b64"])
        return np.frombuffer(raw, dtype=np.uint8).reshape(got["h"], got["w"], 4)

    def close(self) -> None:
        self.page.close()
        assert not self.errors, f"the page reported errors: {self.errors}"
        foreign = [u for u in self.requests if not u.startswith(self.base_url)]
        assert not foreign, f"the page loaded resources from elsewhere: {foreign}"


@pytest.fixture
def page_run(browser_context: Any, atari_server: ServerThread) -> Iterator[PageRun]:
    run = PageRun(browser_context, atari_server.http_url)
    yield run
    run.close()


def _expected_pixels(obs: np.ndarray) -> np.ndarray:
    """What the page must draw for an observation: RGBA, grayscale replicated, RAM 16 per row."""
    if obs.ndim == 3:
        rgb = obs
    elif obs.ndim == 2:
        rgb = np.repeat(obs[:, :, None], 3, axis=2)
    else:
        rgb = np.repeat(obs.reshape(-1, 16)[:, :, None], 3, axis=2)
    alpha = np.full((*rgb.shape[:2], 1), 255, dtype=np.uint8)
    return np.concatenate([rgb, alpha], axis=2)


def _start(run: PageRun, *, game: str, obs_type: str, seed: int, paused: bool) -> None:
    page = run.page
    page.select_option("#game", game)
    page.select_option("#obs-type", obs_type)
    page.fill("#seed", str(seed))
    page.set_checked("#start-paused", paused)
    page.click("#start")
    run.wait_text("stat-episode", f"running (seed {seed})")


def _step_with_key(run: PageRun, key: str, steps: int) -> None:
    run.page.keyboard.press(key)
    run.wait_text("stat-steps", str(steps))


@pytest.mark.parametrize("obs_type", ["rgb", "grayscale", "ram"])
def test_keys_step_the_game_and_the_canvas_shows_each_frame(
    page_run: PageRun, obs_type: str
) -> None:
    reference = atari_factory({"game": "breakout", "obs_type": obs_type})
    try:
        run = page_run
        run.open()
        _start(run, game="breakout", obs_type=obs_type, seed=7, paused=True)
        want = reference.reset(seed=7)
        assert want.obs is not None
        np.testing.assert_array_equal(run.canvas(), _expected_pixels(want.obs))
        assert run.text("stat-frame") == "0"
        assert run.text("stat-lives") == "5"

        for steps, (key, action, name) in enumerate(BREAKOUT_KEYS, start=1):
            before = run.canvas()
            _step_with_key(run, key, steps)
            want = reference.step(action)
            assert want.obs is not None
            assert run.text("stat-action") == name
            assert run.text("stat-frame") == str(want.info["episode_frame_number"])
            np.testing.assert_array_equal(run.canvas(), _expected_pixels(want.obs))
            if obs_type != "ram":  # RAM may not change in a step; the screen does after FIRE
                assert steps == 1 or not np.array_equal(before, run.canvas())
        if obs_type == "ram":
            dump = run.text("bytes").splitlines()
            assert len(dump) == 8
            assert dump[0].split()[1:] == [f"{b:02x}" for b in want.obs[:16]]
    finally:
        reference.close()


def test_playing_advances_frames_and_shows_the_stats(page_run: PageRun, tmp_path: Path) -> None:
    run = page_run
    run.open()
    _start(run, game="breakout", obs_type="rgb", seed=3, paused=False)
    first = run.canvas()
    run.page.keyboard.down("Space")
    run.wait_text("stat-action", "FIRE")
    run.page.keyboard.up("Space")
    run.page.keyboard.down("ArrowLeft")
    run.wait_text("stat-action", "LEFT")
    run.wait_number_above("stat-frame", 40)
    run.page.keyboard.up("ArrowLeft")
    assert not np.array_equal(first, run.canvas()), "the canvas did not change while playing"
    frame = int(run.text("stat-frame"))
    run.wait_number_above("stat-frame", frame)  # still running with no key held
    run.wait_number_above("stat-fps", 0)
    assert run.text("stat-latency").endswith(")") and " ms (p50 " in run.text("stat-latency")
    assert run.text("stat-lives") == "5"
    assert run.page.locator("#actions button").count() == 4

    # Pausing stops the frames; P toggles.
    run.page.keyboard.press("KeyP")
    run.wait_text("play", "Play")
    paused_at = run.text("stat-steps")
    run.page.wait_for_timeout(300 * UNIT)
    assert run.text("stat-steps") == paused_at

    shot = tmp_path / "page.png"
    run.page.screenshot(path=str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    extra = os.environ.get(SCREENSHOT_ENV)
    if extra:
        shutil.copyfile(shot, extra)


def test_random_agent_plays_and_reset_starts_over(page_run: PageRun) -> None:
    run = page_run
    run.open("?game=pong")
    assert run.page.locator("#game").input_value() == "pong"
    assert run.page.locator("#game option").count() == len(games())
    run.page.check("input[name='mode'][value='random']")
    run.page.select_option("#speed", "0")
    _start(run, game="pong", obs_type="rgb", seed=1, paused=False)
    run.wait_number_above("stat-steps", 60)
    run.page.click("#play")  # pause
    run.page.click("#reset")
    run.wait_text("stat-steps", "0")
    assert run.text("stat-frame") == "0"
    assert run.text("stat-score") == "0"
    reference = atari_factory({"game": "pong"})
    try:
        want = reference.reset(seed=1)
        assert want.obs is not None
        np.testing.assert_array_equal(run.canvas(), _expected_pixels(want.obs))
    finally:
        reference.close()


def test_refused_config_is_shown_and_the_page_recovers(page_run: PageRun) -> None:
    run = page_run
    run.open()
    run.page.click("#extra summary")
    run.page.fill("#extra-config", '{"frameskip": 0}')
    run.page.click("#start")
    run.page.wait_for_function(
        "(want) => document.getElementById('status').textContent.includes(want)", arg="bad_config"
    )
    assert "error" in (run.page.locator("#status").get_attribute("class") or "")
    assert run.page.locator("#play").is_disabled()
    run.page.fill("#extra-config", "{}")
    _start(run, game="pong", obs_type="rgb", seed=0, paused=True)
    assert not run.page.locator("#step").is_disabled()


def test_generic_environment_without_game_list(browser_context: Any) -> None:
    with ServerThread(create_app(fake_factory)) as server:
        run = PageRun(browser_context, server.http_url)
        try:
            run.open()
            assert run.page.locator("#game-field").is_hidden()
            run.page.fill("#extra-config", '{"obs_shape": [6, 8], "n_actions": 3}')
            run.page.fill("#seed", "2")
            run.page.check("#start-paused")
            run.page.click("#start")
            run.wait_text("stat-episode", "running (seed 2)")
            assert run.page.locator("#actions button").count() == 3
            assert run.canvas().shape == (6, 8, 4)
            run.page.click("#step")
            run.wait_text("stat-steps", "1")
            assert run.text("stat-frame") == "1"  # no frame number in info: the step count
        finally:
            run.close()


def test_key_combinations_map_to_the_nearest_action(page_run: PageRun) -> None:
    run = page_run
    run.open()
    run.page.click("#extra summary")
    run.page.fill("#extra-config", '{"full_action_space": true}')
    _start(run, game="ms_pacman", obs_type="rgb", seed=0, paused=True)
    assert run.page.locator("#actions button").count() == 18
    keyboard = run.page.keyboard
    # While paused, every key that goes down sends one step with all held keys.
    for steps, (key, name) in enumerate(
        [("ArrowUp", "UP"), ("ArrowRight", "UPRIGHT"), ("Space", "UPRIGHTFIRE")], start=1
    ):
        keyboard.down(key)
        run.wait_text("stat-steps", str(steps))
        assert run.text("stat-action") == name
    for key in ("ArrowUp", "ArrowRight", "Space"):
        keyboard.up(key)

    # Ms. Pac-Man's minimal set has no FIRE: space alone is NOOP, space+up is UP.
    run.page.fill("#extra-config", "{}")
    _start(run, game="ms_pacman", obs_type="rgb", seed=0, paused=True)
    assert run.page.locator("#actions button").count() == 9
    _step_with_key(run, "Space", 1)
    assert run.text("stat-action") == "NOOP"
    keyboard.down("Space")
    keyboard.down("ArrowUp")
    run.wait_text("stat-steps", "3")
    assert run.text("stat-action") == "UP"
    keyboard.up("ArrowUp")
    keyboard.up("Space")
