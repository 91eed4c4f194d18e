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
from openenv_ws.errors import InvalidAction
from openenv_ws.registry import load_env
from openenv_ws.server import ServerThread, create_app
from openenv_ws.spaces import (
    ArraySpec,
    DictSpec,
    DiscreteSpec,
    JsonSpec,
    MultiBinarySpec,
    MultiDiscreteSpec,
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
            "hint": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
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

    def __init__(self, action: Space, observation: Space = OBSERVATION) -> None:
        self._spec = EnvSpec(action=action, observation=observation, extra={"env": "structured"})
        self._steps = 0
        self._last = "none"

    @property
    def spec(self) -> EnvSpec:
        return self._spec

    def _obs(self) -> Any:
        if isinstance(self._spec.observation, TextSpec):
            return self._last
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
            raise InvalidAction(why)
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


def _factory(action: Space, observation: Space = OBSERVATION) -> Any:
    def make(config: dict[str, Any]) -> StructuredEnv:
        return StructuredEnv(action, observation)

    return make


@pytest.fixture
def page_on(browser_context: Any) -> Iterator[Any]:  # noqa: F811 - the imported fixture
    """start(factory, seed, config) -> a page on a server of `factory`, its session
    started paused with `seed` and the extra `config`."""
    stack = contextlib.ExitStack()

    def start(factory: Any, seed: int = 0, config: str = "{}") -> PageRun:
        server = stack.enter_context(ServerThread(create_app(factory)))
        run = PageRun(browser_context, server.http_url)
        stack.callback(run.close)
        run.open()
        run.page.fill("#extra-config", config)
        run.page.check("#start-paused")
        run.page.fill("#seed", str(seed))
        run.page.click("#start")
        run.wait_text("stat-episode", f"running (seed {seed})")
        return run

    with stack:
        yield start


@pytest.fixture
def run_on(page_on: Any) -> Any:
    """start(action, observation) -> a page playing a StructuredEnv of these spaces."""
    return lambda action, observation=OBSERVATION: page_on(_factory(action, observation))


@pytest.fixture
def gym_on(page_on: Any) -> Iterator[Any]:
    """start(gym_id, seed) -> (a page on the Gymnasium plugin's session of `gym_id`,
    gymnasium.make(gym_id) reset with the same seed, and its first observation)."""
    gymnasium = pytest.importorskip("gymnasium")
    made: list[Any] = []

    def start(gym_id: str, seed: int) -> tuple[PageRun, Any, Any]:
        run = page_on(load_env("gymnasium"), seed, json.dumps({"id": gym_id}))
        reference = gymnasium.make(gym_id)
        made.append(reference)
        obs, _ = reference.reset(seed=seed)
        return run, reference, obs

    yield start
    for reference in made:
        reference.close()


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
    form.locator("input[type='text']").first.fill("hi there")
    form.locator("input[type='number']").nth(0).fill("0.75")
    form.locator("input[type='checkbox']").check()
    form.locator("select").select_option(label="angry")
    form.locator("textarea").fill('{"k": [1, 2]}')
    run.page.click("#send-action")
    run.wait_text("stat-steps", "1")
    assert _note(run) == (
        "{message='hi there',meta={k=[1,2]},shout=True,temperature=0.75,tokens=3,tone='angry'}"
    )


def test_gymnasium_blackjack_tuple_observation(gym_on: Any) -> None:
    """Blackjack-v1 served by the Gymnasium plugin: its Tuple observation is a list in
    the tree, equal to gymnasium.make's for the same seed and actions."""
    run, reference, obs = gym_on("Blackjack-v1", 5)
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


def _leaves(run: PageRun) -> list[str]:
    return [str(t) for t in run.page.locator("#tree .t-leaf").all_inner_texts()]


def test_gymnasium_pendulum_box_action_from_a_number_input(gym_on: Any) -> None:
    """Pendulum-v1: the float observation vector is a tree line (dtype, shape, values) and
    the Box action one number input within its bounds; results equal gymnasium.make's."""
    run, reference, obs = gym_on("Pendulum-v1", 3)
    assert run.page.locator("#screen").is_hidden()
    _same_vector(run, obs)
    box = run.page.locator("#action-input input[type='number']")
    assert box.count() == 1
    assert (box.get_attribute("min"), box.get_attribute("max")) == ("-2", "2")
    score = 0.0
    for steps, torque in enumerate((1.5, -0.75, 2.0), start=1):
        box.fill(str(torque))
        run.page.click("#send-action")
        run.wait_text("stat-steps", str(steps))
        obs, reward, *_ = reference.step(np.array([torque], np.float32))
        score += float(reward)
        _same_vector(run, obs)
    assert float(run.text("stat-score")) == pytest.approx(score, abs=0.005)


def _same_vector(run: PageRun, want: np.ndarray[Any, Any]) -> None:
    """The tree's one line: the array's dtype and shape, then its values (6 digits)."""
    leaves = run.page.locator("#tree .t-leaf")
    assert leaves.count() == 1
    assert leaves.locator(".t-type").inner_text() == f"{want.dtype.name} [{want.shape[0]}]"
    values = leaves.locator(".t-values").inner_text()
    got = [float(v) for v in values.strip("[]").split(", ")]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_many_elements_multi_discrete_and_long_text(run_on: Any) -> None:
    """An array past 32 elements is one JSON list; multi_discrete elements are bounded
    by start and nvec; a long text space is a text area; a string observation is one line."""
    action = TupleSpec(
        (
            ArraySpec((5, 8), "int16", 0, 9),
            MultiDiscreteSpec(np.array([3, 5]), np.array([1, -2])),
            TextSpec(200),
        )
    )
    run: PageRun = run_on(action, TextSpec(500))
    page = run.page
    assert _leaves(run) == ['"none"']
    form = page.locator("#action-input")
    big = form.locator("textarea.a-json")
    assert json.loads(big.input_value()) == [0] * 40
    numbers = form.locator("input[type='number']")
    assert numbers.count() == 2
    bounds = [
        (numbers.nth(i).get_attribute("min"), numbers.nth(i).get_attribute("max")) for i in range(2)
    ]
    assert bounds == [("1", "3"), ("-2", "2")]
    big.fill(json.dumps([[i % 10 for i in range(r * 8, r * 8 + 8)] for r in range(5)]))
    numbers.nth(0).fill("3")
    numbers.nth(1).fill("-2")
    form.locator("textarea.a-text").fill("a longer message")
    page.click("#send-action")
    run.wait_text("stat-steps", "1")
    grid = [[i % 10 for i in range(r * 8, r * 8 + 8)] for r in range(5)]
    want = f"[int16{grid},int64[3,-2]".replace(" ", "") + ",'a longer message']"
    assert _leaves(run) == [json.dumps(want)]

    # 39 numbers for 40 elements: named, not sent.
    big.fill(json.dumps(list(range(39))))
    page.click("#send-action")
    page.wait_for_function(
        "() => document.getElementById('status').textContent.includes('give 40 numbers')"
    )
    assert run.text("stat-steps") == "1"


def test_large_discrete_space_is_a_select(run_on: Any) -> None:
    """Past 64 actions a discrete space gets a select (from its start), not a button each."""
    run: PageRun = run_on(DiscreteSpec(100, start=5))
    assert run.page.locator("#actions").is_hidden()
    select = run.page.locator("#action-input select")
    assert select.locator("option").count() == 100
    assert select.locator("option").first.inner_text() == "5"
    select.select_option("42")
    run.page.click("#send-action")
    run.wait_text("stat-steps", "1")
    assert _note(run) == "42"
    assert run.text("stat-action") == "42"


def test_openenv_echo_environment_from_its_schema_form(page_on: Any) -> None:
    """An environment written as openenv-core's docs show, served unchanged: the form
    comes from its Pydantic action's schema, the observation model's dump is the tree."""
    pytest.importorskip("openenv")
    from openenv_ws.envs.openenv import openenv_plugin

    from ..envs.openenv_envs.envs import EchoEnvironment

    run: PageRun = page_on(openenv_plugin(EchoEnvironment))
    assert 'echoed_message: "Echo environment ready!"' in run.text("tree")
    form = run.page.locator("#action-input")
    assert form.locator("legend").inner_text() == "EchoAction"
    message = form.get_by_role("textbox", name="message *")
    message.fill("hello web")
    run.page.click("#send-action")
    run.wait_text("stat-steps", "1")
    tree = run.text("tree")
    assert 'echoed_message: "hello web"' in tree
    assert "message_length: 9" in tree
    assert run.text("stat-score") == "0.90"
