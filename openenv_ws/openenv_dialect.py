"""OpenEnv's JSON shapes, sans-I/O: what OpenEnv's clients send and expect to read.

OpenEnv (the ``openenv-core`` package) speaks JSON. Its WebSocket messages
are ``{"type": "reset" | "step" | "state" | "close", "data": {...}}``,
answered by ``{"type": "observation" | "state" | "error", "data": {...}}``;
its HTTP routes take ``POST /reset`` ``{"seed": ..., "episode_id": ...}`` and
``POST /step`` ``{"action": {...}, "timeout_s": ...}``. An observation reply
is ``{"observation": {...}, "reward": float | null, "done": bool}``.

This module maps those shapes onto protocol v1 frames and back, for the
server's compatibility layer (:mod:`openenv_ws.server.routes.openenv_compat`) and for
:class:`~openenv_ws.client.HTTPEnvClient` subclasses written in OpenEnv's
style. What an observation looks like depends on the session's spaces:

- json (an OpenEnv environment served unchanged, :mod:`openenv_ws.envs.openenv`):
  as openenv-core's server sends it. The ``result``'s obs is the
  Observation model's dump, ``reward`` included; the reply's observation is
  that dump without ``reward``, its reward the dump's (None stays null).
  An action is the Action model's fields, the whole ``data`` object.
- array (Atari): OpenEnv's Atari environment's: ``screen`` (the
  observation as a flat list of numbers), ``screen_shape``, ``legal_actions``,
  and the ``info`` entries (for Atari ``lives``, ``episode_frame_number``,
  ``frame_number``), plus ``terminated`` and ``truncated``.
- any other space: ``obs`` (the value as JSON), then the same ``info``
  entries, ``terminated`` and ``truncated``.
"""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Mapping
from typing import Any

import numpy as np

from .brief import brief_keys
from .errors import ProtocolError
from .protocol import Result

__all__ = [
    "ACTION_KEYS",
    "OPENENV_ERROR_CODES",
    "action_from_openenv",
    "dumps",
    "legal_actions",
    "metadata_payload",
    "model_space",
    "openenv_error_code",
    "plain_json",
    "reset_fields",
    "result_payload",
    "schema_payload",
    "state_payload",
]

#: OpenEnv's error code for each protocol error code (others: ``SESSION_ERROR``).
OPENENV_ERROR_CODES: dict[str, str] = {
    "bad_frame": "INVALID_JSON",
    "text_frame": "INVALID_JSON",
    "bad_request": "VALIDATION_ERROR",
    "invalid_action": "VALIDATION_ERROR",
    "unknown_op": "UNKNOWN_TYPE",
    "capacity": "CAPACITY_REACHED",
    "bad_config": "FACTORY_ERROR",
    "not_reset": "EXECUTION_ERROR",
    "episode_over": "EXECUTION_ERROR",
    "unsupported": "EXECUTION_ERROR",
    "internal": "EXECUTION_ERROR",
}

#: Keys an OpenEnv action may hold. ``action_id`` (discrete) or ``action`` (any
#: other action) is the action; OpenEnv's Atari action also carries
#: ``game_name``, ``obs_type`` and ``full_action_space``, which its server
#: ignores (the session's config decides), and so does this one.
ACTION_KEYS = frozenset(
    {"action_id", "action", "game_name", "obs_type", "full_action_space", "metadata"}
)


def openenv_error_code(code: str) -> str:
    """OpenEnv's name for a protocol error code."""
    return OPENENV_ERROR_CODES.get(code, "SESSION_ERROR")


def plain_json(value: Any) -> Any:
    """A protocol value as plain JSON data: arrays become nested lists, bytes base64 text.

    Raises:
        ProtocolError: a value protocol v1 cannot carry either (an object of another type).
    """
    if value is None or isinstance(value, str | int | float):
        return value
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {k: plain_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain_json(v) for v in value]
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, np.generic):
        return value.item()
    raise ProtocolError(
        f"values of type {type(value).__name__} cannot be sent; "
        "use nil, bool, int, float, str, bytes, numpy arrays, lists and maps"
    )


def model_space(spec: Mapping[str, Any], side: str) -> bool:
    """Whether the session's `side` (``"action"`` or ``"observation"``) is an OpenEnv
    model (a json space)."""
    space = spec.get(side)
    return isinstance(space, Mapping) and space.get("type") == "json"


def action_from_openenv(data: Any, *, model: bool = False) -> Any:
    """The protocol ``step.action`` for an OpenEnv action object.

    With `model` (the session's action space is an OpenEnv Action model) the
    object is the action, checked by the environment.

    Raises:
        ProtocolError: (``bad_request``) not an object, unknown keys, or neither
            ``action_id`` nor ``action``.
    """
    if model and isinstance(data, Mapping):
        return dict(data)
    if not isinstance(data, Mapping):
        raise ProtocolError(
            f'the action must be a JSON object such as {{"action_id": 0}}, '
            f"got {type(data).__name__}",
            code="bad_request",
        )
    unknown = [key for key in data if key not in ACTION_KEYS]
    if unknown:
        raise ProtocolError(
            f"unknown action field(s) {brief_keys(unknown, most=4)}; an action holds "
            "'action_id' (discrete actions) or 'action'",
            code="bad_request",
        )
    if "action_id" in data:
        action = data["action_id"]
        if type(action) is not int:
            raise ProtocolError(
                f"'action_id' must be an integer, got {type(action).__name__}", code="bad_request"
            )
        return action
    if "action" in data:
        return data["action"]
    raise ProtocolError(
        "the action has neither 'action_id' (discrete actions) nor 'action'", code="bad_request"
    )


def reset_fields(data: Any) -> dict[str, Any]:
    """The ``reset`` frame fields for OpenEnv's reset parameters.

    ``seed`` and ``episode_id`` map to the fields of the same name; any other
    key goes to ``options``, which the environment checks.

    Raises:
        ProtocolError: (``bad_request``) the parameters are not an object.
    """
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ProtocolError(
            f"reset parameters must be a JSON object, got {type(data).__name__}",
            code="bad_request",
        )
    options = {k: v for k, v in data.items() if k not in ("seed", "episode_id")}
    fields: dict[str, Any] = {"seed": data.get("seed"), "episode_id": data.get("episode_id")}
    if options:
        fields["options"] = options
    return fields


def legal_actions(spec: Mapping[str, Any]) -> list[int]:
    """The legal action ids of a session's spec (the ``opened.spec`` map)."""
    legal = spec.get("legal_actions")
    if legal is not None:
        return list(legal)
    action = spec.get("action") or {}
    if action.get("type") == "discrete":
        return list(range(int(action["n"])))
    return []


def result_payload(
    frame: Result, legal: list[int], *, lists: bool = True, model: bool = False
) -> dict[str, Any]:
    """OpenEnv's ``{"observation", "reward", "done"}`` for a ``result`` frame.

    With `model` the observation space is an OpenEnv Observation model (see
    the module); otherwise with ``lists=False`` an array observation stays a
    flat array, for :func:`dumps`.
    """
    obs = frame.obs
    if model and type(obs) is dict:
        fields = plain_json(obs)
        reward = fields.pop("reward", frame.reward)
        return {"observation": fields, "reward": reward, "done": frame.done}
    if obs is not None and type(obs) is not np.ndarray:
        observation: dict[str, Any] = {"obs": plain_json(obs)}
        return _with_info(observation, frame)
    screen: Any = [] if obs is None else obs.ravel()
    observation = {
        "screen": screen.tolist() if lists and obs is not None else screen,
        "screen_shape": list(obs.shape) if obs is not None else [],
        "legal_actions": legal,
    }
    return _with_info(observation, frame)


def _with_info(observation: dict[str, Any], frame: Result) -> dict[str, Any]:
    for key, value in frame.info.items():
        observation.setdefault(key, plain_json(value))
    observation["terminated"] = frame.terminated
    observation["truncated"] = frame.truncated
    return {"observation": observation, "reward": frame.reward, "done": frame.done}


# Each uint8 value as 4 bytes of JSON: right-aligned digits and a comma (spaces are
# JSON whitespace), so a whole screen is written by one table lookup.
_U8_JSON = np.frombuffer(b"".join(f"{i:>3},".encode() for i in range(256)), np.uint8).reshape(
    256, 4
)


def _array_json(arr: np.ndarray[Any, Any]) -> str:
    if arr.dtype == np.uint8 and arr.size:
        digits: bytes = _U8_JSON[arr.ravel()].tobytes()
        return "[" + digits[:-1].decode("ascii") + "]"
    return json.dumps(arr.tolist())


def dumps(payload: Any) -> str:
    """Compact JSON text of an OpenEnv message; arrays are written as flat lists of numbers."""
    arrays: list[np.ndarray[Any, Any]] = []

    def mark(value: Any) -> Any:
        if isinstance(value, np.ndarray):
            arrays.append(value)
            return f"{_MARK}{len(arrays) - 1}"
        return plain_json(value)

    text = json.dumps(payload, separators=(",", ":"), default=mark)
    for i, arr in enumerate(arrays):
        text = text.replace(json.dumps(f"{_MARK}{i}"), _array_json(arr), 1)
    return text


# Stands for an array in the text until it is spliced in; random, so no value can forge it.
_MARK = f"\u0000ndarray:{secrets.token_hex(8)}:"


def state_payload(state: Mapping[str, Any]) -> dict[str, Any]:
    """The episode state as OpenEnv's ``State`` JSON (``episode_id``, ``step_count``, extras)."""
    return {k: plain_json(v) for k, v in state.items()}


_JSON_TYPES = {"bool": "boolean", "float16": "number", "float32": "number", "float64": "number"}


def schema_payload(spec: Mapping[str, Any]) -> dict[str, Any]:
    """OpenEnv's ``GET /schema`` reply: JSON schemas of action, observation and state.

    An OpenEnv model's schema is its own (``spec.state_schema`` for the state).
    """
    if model_space(spec, "action") and model_space(spec, "observation"):
        return {
            "action": spec["action"].get("schema", {}),
            "observation": spec["observation"].get("schema", {}),
            "state": spec.get("state_schema") or _STATE_SCHEMA,
        }
    action_spec = spec.get("action") or {}
    if action_spec.get("type") == "discrete":
        n = int(action_spec["n"])
        action: dict[str, Any] = {
            "title": "Action",
            "type": "object",
            "properties": {
                "action_id": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": n - 1,
                    "description": "index into the action set: "
                    + ", ".join(f"{i} {m}" for i, m in enumerate(action_spec.get("meanings", ()))),
                }
            },
            "required": ["action_id"],
        }
    else:
        action = {
            "title": "Action",
            "type": "object",
            "properties": {"action": {"description": f"an array action: {action_spec}"}},
            "required": ["action"],
        }
    obs_spec = spec.get("observation") or {}
    item = _JSON_TYPES.get(str(obs_spec.get("dtype")), "integer")
    observation = {
        "title": "Observation",
        "type": "object",
        "properties": {
            "screen": {
                "type": "array",
                "items": {"type": item},
                "description": "the observation, flattened in C order",
            },
            "screen_shape": {
                "type": "array",
                "items": {"type": "integer"},
                "default": list(obs_spec.get("shape", ())),
            },
            "legal_actions": {"type": "array", "items": {"type": "integer"}},
            "terminated": {"type": "boolean"},
            "truncated": {"type": "boolean"},
        },
        "additionalProperties": True,
        "required": ["screen", "screen_shape", "legal_actions"],
    }
    return {"action": action, "observation": observation, "state": _STATE_SCHEMA}


_STATE_SCHEMA = {
    "title": "State",
    "type": "object",
    "properties": {
        "episode_id": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "step_count": {"type": "integer", "minimum": 0},
    },
    "additionalProperties": True,
}


def metadata_payload(spec: Mapping[str, Any], version: str) -> dict[str, Any]:
    """OpenEnv's ``GET /metadata`` reply (``EnvironmentMetadata``): an OpenEnv
    environment's own (``spec.openenv_metadata``), or one naming the environment."""
    own = spec.get("openenv_metadata")
    if isinstance(own, Mapping):
        return dict(own)
    family = str(spec.get("env", "environment"))
    game = spec.get("game")
    name = f"{family}:{game}" if game else family
    return {
        "name": name,
        "description": f"{name} served by openenv-ws (protocol v1 on /ws, OpenEnv JSON dialect)",
        "readme_content": None,
        "version": version,
        "author": None,
        "documentation_url": None,
    }
