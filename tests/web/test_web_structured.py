"""The web page with structured spaces (SPEC section 22), in real headless Chromium.

An environment defined here has a Dict observation (a number, a string, a
small array, an image, a nested list and map) and a Dict action (discrete,
array, text, multi_binary, tuple); the page must show the observation as a
tree, build inputs from the action space and send what they hold. A JSON
(OpenEnv-style) action space gets a form from its schema's properties.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pytest

from openenv_ws.environment import Environment, EnvResult, EnvSpec
from openenv_ws.registry import load_env
from openenv_ws.server import ServerThread, create_app
from openenv_ws.spaces import (
    ArraySpec,
    DictSpec,
    DiscreteSpec,
    JsonSpec,
    MultiBinarySpec,
    Space,
    TextSpec,
    TupleSpec,
)

from .test_web_page import PageRun, browser_context  # noqa: F401 - the fixture

ACTION = DictSpec(
    (
        ("move", DiscreteSpec(3, ("left", "stay", "right"), start=-1)),
        ("force", ArraySpec((2,), "float32", -1.0, 1.0)),
        ("say", TextSpec(12, 1, "abcdefghijklmnopqrstuvwxyz ")),
        ("switches", MultiBinarySpec((3,))),
        ("pair", TupleSpec((DiscreteSpec(4), TextSpec(5)))),
    )
)
OBSERVATION = DictSpec(
    (
        ("count", DiscreteSpec(1000)),
        ("note", TextSpec(64)),
        ("position", ArraySpec((3,), "float64")),
        ("picture", ArraySpec((8, 12, 3), "uint8", 0, 255)),
        ("history", TupleSpec((DiscreteSpec(9), DiscreteSpec(9)))),
        ("deep", DictSpec((("flag", DiscreteSpec(2)), ("grid", ArraySpec((2, 2), "int32"))))),
    )
)
# What an OpenEnv model's JSON schema looks like (Pydantic's model_json_schema()).
JSON_ACTION = JsonSpec(
    {
        "title": "ChatAction",
        "type": "object",
        "properties": {
            "message": {"title": "Message", "type": "string"},
            "temperature": {"title": "Temperature", "type": "number", "default": 0.5},
            "tokens": {"title": "Tokens", "type": "integer", "default": 3},
            "shout": {"title": "Shout", "type": "boolean", "default": False},
            "tone": {"$ref": "#/$defs/Tone", "default": "calm"},
            "meta": {"title": "Meta", "type": "object", "default": {}},
        },
        "required": ["message"],
        "$defs": {"Tone": {"title": "Tone", "type": "string", "enum": ["calm", "angry"]}},
    },
    "ChatAction",
)


def _picture(step: int) -> np.ndarray[Any, Any]:
    img = np.zeros((8, 12, 3), np.uint8)
    img[:, :, 0] = np.arange(12, dtype=np.uint8) * 20
    img[:, :, 1] = step * 40 % 256
    return img


class StructuredEnv(Environment):
    """Echoes each action into the next observation, as text, so a test can read it back."""

    def __init__(self, action: Space) -> None:
        self._spec = EnvSpec(action=action, observation=OBSERVATION, extra={"env": "structured"})
        self._steps = 0
        self._last = "none"

    @property
    def spec(self) -> EnvSpec:
        return self._spec

    def _obs(self) -> dict[str, Any]:
        return {
            "count": self._steps,
            "note": self._last,
            "position": np.array([0.5, -1.25, self._steps], np.float64),
            "picture": _picture(self._steps),
            "history": [self._steps % 9, 8],
            "deep": {"flag": 1, "grid": np.arange(4, dtype=np.int32).reshape(2, 2)},
        }

    def reset(
        self,
        *,
        seed: int | None = None,
        episode_id: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> EnvResult:
        self._steps = 0
        self._last = "none"
        return EnvResult(obs=self._obs())

    def step(self, action: Any, *, obs: bool = True) -> EnvResult:
        why = self._spec.action.check(action)
        if why is not None:
            raise ValueError(why)
        self._steps += 1
        self._last = _describe(action)
        return EnvResult(obs=self._obs(), reward=1.0, truncated=self._steps >= 50)

    def state(self) -> dict[str, Any]:
        return {"steps": self._steps}


def _describe(v: Any) -> str:
    """An action as text with arrays as dtype and values (what the test expects back)."""
    if isinstance(v, np.ndarray):
        return f"{v.dtype.name}{v.tolist()}".replace(" ", "")
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}={_describe(v[k])}" for k in sorted(v)) + "}"
    if isinstance(v, list | tuple):
        return "[" + ",".join(_describe(x) for x in v) + "]"
    return repr(v)


def _factory(action: Space) -> Any:
    def make(config: dict[str, Any]) -> StructuredEnv:
        return StructuredEnv(action)

    return make


@pytest.fixture
def run_on(browser_context: Any) -> Iterator[Any]:  # noqa: F811 - the imported fixture
    stack = contextlib.ExitStack()

    def start(action: Space) -> PageRun:
        server = stack.enter_context(ServerThread(create_app(_factory(action))))
        run = PageRun(browser_context, server.http_url)
        stack.callback(run.close)
        run.open()
        run.page.check("#start-paused")
        run.page.fill("#seed", "0")
        run.page.click("#start")
        run.wait_text("stat-episode", "running (seed 0)")
        return run

    with stack:
        yield start


def _note(run: PageRun) -> str:
    text = run.page.locator("#tree .t-leaf", has_text="note:").inner_text()
    quoted = str(text).split("note: ", 1)[1].strip()
    return str(json.loads(quoted))


def test_dict_observation_is_a_tree_and_dict_action_comes_from_inputs(run_on: Any) -> None:
    run: PageRun = run_on(ACTION)
    page = run.page
    assert page.locator("#screen").is_hidden()
    assert page.locator("#tree").is_visible()
    tree = run.text("tree")
    assert "map of 6" in tree
    assert "count: 0" in tree
    assert 'note: "none"' in tree
    assert "float64 [3]" in tree and "[0.5, -1.25, 0]" in tree
    assert "int32 [2, 2]" in tree and "[[0, 1], [2, 3]]" in tree
    assert "history: list of 2" in tree
    # The image inside the map is drawn, pixel for pixel.
    pixels = page.evaluate(
        """() => {
            const c = document.querySelector('#tree canvas.t-image');
            return {w: c.width, h: c.height,
                    px: Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data)};
        }"""
    )
    assert (pixels["w"], pixels["h"]) == (12, 8)
    rgba = np.array(pixels["px"], np.uint8).reshape(8, 12, 4)
    np.testing.assert_array_equal(rgba[:, :, :3], _picture(0))

    # The action inputs: no Atari buttons, a select for discrete (with its start), numbers, text...
    assert page.locator("#actions").is_hidden()
    assert page.locator("#action-form").is_visible()
    form = page.locator("#action-input")
    assert form.locator("select").first.locator("option").all_inner_texts() == [
        "-1: left",
        "0: stay",
        "1: right",
    ]
    form.locator("select").first.select_option("1")
    numbers = form.locator("input[type='number']")
    assert numbers.nth(0).get_attribute("min") == "-1"
    assert numbers.nth(0).get_attribute("max") == "1"
    numbers.nth(0).fill("0.5")
    numbers.nth(1).fill("-0.25")
    texts = form.locator("input.a-text")
    assert texts.nth(0).get_attribute("maxlength") == "12"
    texts.nth(0).fill("hello")
    form.locator("input[type='checkbox']").nth(1).check()
    form.locator("select").nth(1).select_option("3")
    texts.nth(1).fill("ok")
    page.click("#send-action")
    run.wait_text("stat-steps", "1")
    want = "{force=float32[0.5,-0.25],move=1,pair=[3,'ok'],say='hello',switches=int8[0,1,0]}"
    assert _note(run) == want
    assert "count: 1" in run.text("tree")

    # A wrong input is named, and nothing is sent.
    numbers.nth(1).fill("")
    page.click("#send-action")
    page.wait_for_function(
        "() => document.getElementById('status').textContent.includes('force: element 1')"
    )
    assert run.text("stat-steps") == "1"
    numbers.nth(1).fill("1")

    # The Step button sends the inputs too; a closed branch stays closed across steps.
    page.locator("#tree details[data-path='$/deep'] > summary").click()
    assert not page.locator("#tree details[data-path='$/deep']").evaluate("d => d.open")
    page.click("#step")
    run.wait_text("stat-steps", "2")
    assert _note(run).startswith("{force=float32[0.5,1.0],move=1,")
    assert not page.locator("#tree details[data-path='$/deep']").evaluate("d => d.open")


def test_random_agent_samples_the_action_space(run_on: Any) -> None:
    run: PageRun = run_on(ACTION)
    run.page.check("input[name='mode'][value='random']")
    run.page.select_option("#speed", "0")
    run.page.click("#play")
    # Every sampled action is checked by the environment: an invalid one would stop the page.
    run.wait_number_above("stat-steps", 30)
    run.page.click("#play")
    assert "refused" not in run.text("status")
    assert _note(run).startswith("{force=float32[")


def test_json_schema_action_gets_a_form(run_on: Any) -> None:
    run: PageRun = run_on(JSON_ACTION)
    form = run.page.locator("#action-input")
    assert form.locator("legend").inner_text() == "ChatAction"
    # An optional field may be left out ("(none)"); the schema's default is chosen first.
    assert form.locator("select option").all_inner_texts() == ["(none)", "calm", "angry"]
    assert form.locator("select").evaluate("s => s.selectedOptions[0].textContent") == "calm"
    form.locator("input[type='text']").fill("hi there")
    form.locator("input[type='number']").nth(0).fill("0.75")
    form.locator("input[type='checkbox']").check()
    form.locator("select").select_option(label="angry")
    form.locator("textarea").fill('{"k": [1, 2]}')
    run.page.click("#send-action")
    run.wait_text("stat-steps", "1")
    assert _note(run) == (
        "{message='hi there',meta={k=[1,2]},shout=True,temperature=0.75,tokens=3,tone='angry'}"
    )


def test_gymnasium_blackjack_tuple_observation(browser_context: Any) -> None:  # noqa: F811
    """Blackjack-v1 served by the Gymnasium plugin: its Tuple observation is a list in
    the tree, equal to gymnasium.make's for the same seed and actions."""
    gymnasium = pytest.importorskip("gymnasium")
    reference = gymnasium.make("Blackjack-v1")
    with ServerThread(create_app(load_env("gymnasium"))) as server:
        run = PageRun(browser_context, server.http_url)
        try:
            run.open()
            run.page.fill("#extra-config", '{"id": "Blackjack-v1"}')
            run.page.fill("#seed", "5")
            run.page.check("#start-paused")
            run.page.click("#start")
            run.wait_text("stat-episode", "running (seed 5)")
            obs, _ = reference.reset(seed=5)
            assert run.page.locator("#tree > details > summary").inner_text() == "list of 3"
            assert _leaves(run) == [f"[{i}]: {int(v)}" for i, v in enumerate(obs)]
            # Discrete actions keep the buttons: 1 hits, 0 sticks (which ends the episode).
            assert run.page.locator("#actions button").count() == 2
            for steps, action in enumerate((1, 0), start=1):
                obs, reward, terminated, truncated, _ = reference.step(action)
                run.page.click(f"#actions button[data-action='{action}']")
                run.wait_text("stat-steps", str(steps))
                assert _leaves(run) == [f"[{i}]: {int(v)}" for i, v in enumerate(obs)]
                assert float(run.text("stat-score")) == reward
                if terminated or truncated:
                    run.wait_text("stat-episode", "game over")
                    break
        finally:
            run.close()
            reference.close()


def _leaves(run: PageRun) -> list[str]:
    return [str(t) for t in run.page.locator("#tree .t-leaf").all_inner_texts()]
