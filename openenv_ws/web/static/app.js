// The page: one session over the server's /ws endpoint (protocol v1, session.js),
// an image observation drawn on a canvas (screen.js), any other shown as a tree
// (tree.js), played from the keyboard, from inputs built from the action space
// (inputs.js) or by a random agent.
import { InputError, actionInput } from "./inputs.js";
import { Float, NDArray, PROTOCOL_VERSION, ProtocolError } from "./protocol.js";
import { Screen } from "./screen.js";
import { RemoteError, Session } from "./session.js";
import { Tree } from "./tree.js";

const $ = (id) => document.getElementById(id);
const ui = {
  conn: $("conn"),
  form: $("session-form"),
  game: $("game"),
  gameField: $("game-field"),
  obsType: $("obs-type"),
  obsField: $("obs-field"),
  seed: $("seed"),
  extra: $("extra-config"),
  token: $("token"),
  speed: $("speed"),
  scale: $("scale"),
  autoReset: $("auto-reset"),
  startPaused: $("start-paused"),
  play: $("play"),
  step: $("step"),
  reset: $("reset"),
  stop: $("stop"),
  screen: $("screen"),
  bytes: $("bytes"),
  status: $("status"),
  actions: $("actions"),
  actionHint: $("action-hint"),
  actionForm: $("action-form"),
  actionInput: $("action-input"),
  tree: $("tree"),
  stat: {
    score: $("stat-score"),
    lives: $("stat-lives"),
    frame: $("stat-frame"),
    steps: $("stat-steps"),
    latency: $("stat-latency"),
    fps: $("stat-fps"),
    action: $("stat-action"),
    episode: $("stat-episode"),
    session: $("stat-session"),
  },
};
const screen = new Screen(ui.screen, ui.bytes);
const tree = new Tree(ui.tree);
const draw = (obs) => screen.draw(obs, Number(ui.scale.value));

// Arrays drawn on the canvas: pictures (height x width, with 3 or 4 channels or
// none) and bytes (such as Atari's RAM); any other value (a map, a list, a
// number, a string, a vector of floats) is a tree.
const onCanvas = (obs) =>
  obs instanceof NDArray && (obs.dtype === "uint8" || obs.shape.length === 2 || (obs.shape.length === 3 && (obs.shape[2] === 3 || obs.shape[2] === 4)));

function showObs(obs) {
  const image = onCanvas(obs);
  ui.screen.hidden = !image;
  ui.tree.hidden = image;
  if (image) draw(obs);
  else {
    ui.bytes.hidden = true;
    tree.show(obs);
  }
}

// ----------------------------------------------------------------- state

/** Discrete spaces of up to this many actions get a button each (and the keys); larger ones a select. */
const MAX_BUTTONS = 64;

const game = {
  session: null,
  meanings: [],
  nActions: 0,
  start: 0, // the first discrete action
  input: null, // the action inputs of a space that is not discrete: {node, read, sample}
  playing: false,
  running: false, // an episode is in progress
  inflight: null, // the promise of the request on the wire, if any
  loopToken: 0,
  score: 0,
  steps: 0,
  frame: 0,
  held: new Set(),
  queued: null, // an action clicked while playing, sent with the next step
  latencies: [],
  renders: [],
  wsPath: "/ws",
};

const setStatus = (text, error = false) => {
  ui.status.textContent = text;
  ui.status.classList.toggle("error", error);
};
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// ----------------------------------------------------------------- stats

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

function showStats(info, actionName) {
  const now = performance.now();
  game.renders.push(now);
  while (game.renders[0] < now - 1000) game.renders.shift();
  ui.stat.score.textContent = Number.isInteger(game.score) ? String(game.score) : game.score.toFixed(2);
  ui.stat.lives.textContent = info.lives ?? "–";
  ui.stat.frame.textContent = String(game.frame);
  ui.stat.steps.textContent = String(game.steps);
  if (game.latencies.length > 0) {
    const last = game.latencies[game.latencies.length - 1];
    ui.stat.latency.textContent = `${last.toFixed(2)} ms (p50 ${median(game.latencies).toFixed(2)})`;
  }
  ui.stat.fps.textContent = String(game.renders.length);
  if (actionName !== undefined) ui.stat.action.textContent = actionName;
}

// ----------------------------------------------------------------- actions

// Arrow keys and space held right now -> an ALE action name such as
// "UPRIGHTFIRE", falling back to the nearest action the game has.
function keyboardAction() {
  const k = game.held;
  const v = k.has("ArrowUp") && !k.has("ArrowDown") ? "UP" : k.has("ArrowDown") && !k.has("ArrowUp") ? "DOWN" : "";
  const h = k.has("ArrowRight") && !k.has("ArrowLeft") ? "RIGHT" : k.has("ArrowLeft") && !k.has("ArrowRight") ? "LEFT" : "";
  const f = k.has("Space") ? "FIRE" : "";
  for (const name of [v + h + f, v + h, h + f, v + f, h, v, f]) {
    if (name === "") continue;
    const index = game.meanings.indexOf(name);
    if (index >= 0) return game.start + index;
  }
  const noop = game.meanings.indexOf("NOOP");
  return game.start + (noop >= 0 ? noop : 0);
}

function chooseAction() {
  if (game.queued !== null) {
    const a = game.queued;
    game.queued = null;
    return a;
  }
  const random = document.querySelector('input[name="mode"]:checked').value === "random";
  if (game.input !== null) return random ? game.input.sample() : game.input.read();
  if (random) return game.start + Math.floor(Math.random() * game.nActions);
  return keyboardAction();
}

// An action in a few words: a discrete action's name, anything else compactly.
function actionName(a) {
  if (typeof a === "number") return game.meanings[a - game.start] ?? String(a);
  const text = JSON.stringify(a, (_, v) =>
    v instanceof NDArray ? Array.from(v.data, Number) : typeof v === "bigint" ? Number(v) : v instanceof Float ? v.value : v,
  );
  return text.length > 60 ? `${text.slice(0, 59)}…` : text;
}

function keyHint(name) {
  let hint = "";
  if (name.includes("UP")) hint += "↑";
  if (name.includes("DOWN")) hint += "↓";
  if (name.includes("LEFT")) hint += "←";
  if (name.includes("RIGHT")) hint += "→";
  if (name.includes("FIRE")) hint += "␣";
  return hint;
}

function buildActions() {
  ui.actions.replaceChildren();
  for (let a = game.start; a < game.start + game.nActions; a++) {
    const li = document.createElement("li");
    const button = document.createElement("button");
    button.type = "button";
    button.dataset.action = String(a);
    const index = document.createElement("span");
    index.className = "index";
    index.textContent = String(a);
    button.append(index, actionName(a));
    const keys = document.createElement("span");
    keys.className = "keys";
    keys.textContent = keyHint(actionName(a));
    button.append(keys);
    li.append(button);
    ui.actions.append(li);
  }
}

function markAction(a) {
  for (const b of ui.actions.querySelectorAll("button")) b.classList.toggle("current", b.dataset.action === String(a));
}

// ----------------------------------------------------------------- session flow

function setControls(open) {
  for (const b of [ui.play, ui.step, ui.reset, ui.stop]) b.disabled = !open;
  ui.play.textContent = game.playing ? "Pause" : "Play";
  ui.conn.classList.toggle("on", open);
  ui.conn.classList.toggle("off", !open);
  if (!open) ui.conn.textContent = "no session";
}

function showResult(reply, action) {
  game.frame = reply.info.episode_frame_number ?? game.steps;
  showObs(reply.obs);
  showStats(reply.info, action === undefined ? undefined : actionName(action));
  if (action !== undefined) markAction(action);
  if (reply.done) {
    game.running = false;
    const how = reply.terminated ? "game over" : "truncated";
    ui.stat.episode.textContent = how;
    setStatus(`Episode ended (${how}) after ${game.steps} steps with score ${ui.stat.score.textContent}. Press Reset (R).`);
  }
}

// Every request goes through here, one at a time, so a reset never races a
// step. Returns the reply and its round trip in milliseconds.
async function send(frame) {
  while (game.inflight !== null) await game.inflight.catch(() => {});
  const session = game.session;
  if (session === null) throw new Error("no session; start one first");
  const pending = session.request(frame);
  game.inflight = pending;
  try {
    const reply = await pending;
    return [reply, session.latency];
  } finally {
    if (game.inflight === pending) game.inflight = null;
  }
}

async function stepOnce(action) {
  if (!game.running) return;
  let reply;
  let latency;
  try {
    if (typeof action === "function") action = action();
    [reply, latency] = await send({ op: "step", action });
  } catch (err) {
    fail(err);
    return;
  }
  game.latencies.push(latency);
  if (game.latencies.length > 100) game.latencies.shift();
  game.steps += 1;
  game.score += reply.reward;
  showResult(reply, action);
}

function parseSeed() {
  const text = ui.seed.value.trim();
  if (text === "") return null;
  if (!/^\d+$/.test(text)) throw new Error(`seed must be a non-negative integer, got ${text}`);
  const big = BigInt(text);
  return big <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(big) : big;
}

async function resetEpisode() {
  const seed = parseSeed();
  const [reply] = await send({ op: "reset", seed });
  game.score = 0;
  game.steps = 0;
  game.latencies = [];
  game.running = true;
  ui.stat.episode.textContent = seed === null ? "running" : `running (seed ${seed})`;
  showResult(reply);
  ui.stat.action.textContent = "–";
  markAction(null);
}

async function loop() {
  const token = ++game.loopToken;
  let next = performance.now();
  while (game.playing && game.running && token === game.loopToken) {
    await stepOnce(chooseAction);
    if (!game.running && game.playing && ui.autoReset.checked && game.session !== null) {
      const seed = parseSeed();
      if (seed !== null) ui.seed.value = String(typeof seed === "bigint" ? seed + 1n : seed + 1);
      await resetEpisode().catch(fail);
    }
    const speed = Number(ui.speed.value);
    if (speed > 0) {
      next += 1000 / speed;
      const now = performance.now();
      if (next < now - 250) next = now; // fell behind (a slow step, a hidden tab): no burst to catch up
      await sleep(Math.max(0, next - now));
    }
  }
  if (token === game.loopToken && game.playing && !game.running) {
    game.playing = false;
    setControls(game.session !== null);
  }
}

function setPlaying(on) {
  game.playing = on && game.running;
  setControls(game.session !== null);
  if (game.playing) {
    setStatus(
      document.querySelector('input[name="mode"]:checked').value === "random"
        ? "The random agent is playing."
        : game.input !== null
          ? "Playing: every step sends the action set below; P pauses."
          : "Playing: arrows and space steer; P pauses.",
    );
    loop();
  } else if (game.running) {
    setStatus(game.input !== null ? "Paused: Send action steps once with the action set below; P resumes." : "Paused: each arrow or space press sends one step; P resumes.");
  }
}

function fail(err) {
  if (err instanceof InputError) {
    setStatus(`The action is not ready: ${err.message}`, true);
    if (game.playing) {
      game.playing = false;
      setControls(game.session !== null);
    }
    return;
  }
  if (err instanceof RemoteError && !err.fatal) {
    setStatus(`The server refused the request: ${err.message}`, true);
    if (err.code === "episode_over") game.running = false;
    return;
  }
  setStatus(err instanceof ProtocolError ? `Protocol error: ${err.message}` : err.message, true);
}

function onLost(session, why) {
  if (game.session !== session) return;
  game.session = null;
  game.running = false;
  game.playing = false;
  game.loopToken++;
  setControls(false);
  setStatus(`Session over: ${why}. Start a new one.`, true);
}

async function closeSession() {
  const session = game.session;
  game.loopToken++;
  game.playing = false;
  game.running = false;
  game.session = null;
  game.inflight = null;
  setControls(false);
  ui.stat.episode.textContent = "–";
  ui.stat.session.textContent = "–";
  if (session !== null) await session.close();
}

function readConfig() {
  let config;
  try {
    config = JSON.parse(ui.extra.value.trim() || "{}");
  } catch (err) {
    throw new Error(`extra config is not valid JSON: ${err.message}`);
  }
  if (config === null || typeof config !== "object" || Array.isArray(config)) {
    throw new Error("extra config must be a JSON object, e.g. {\"frameskip\": 4}");
  }
  if (!ui.gameField.hidden) config.game = ui.game.value;
  if (!ui.obsField.hidden) config.obs_type = ui.obsType.value;
  return config;
}

async function startSession(event) {
  event.preventDefault();
  await closeSession();
  let session;
  try {
    const config = readConfig();
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const url = `${scheme}//${location.host}${game.wsPath}`;
    setStatus(`Connecting to ${url} ...`);
    session = await Session.connect(url);
    const token = ui.token.value === "" ? null : ui.token.value;
    const opened = await session.request({ op: "open", version: PROTOCOL_VERSION, config, token, structured: true });
    const action = opened.spec.action ?? {};
    const discrete = action.type === "discrete" && Number(action.n) <= MAX_BUTTONS;
    game.input = discrete ? null : actionInput(action);
    game.session = session;
    session.onlost = (why) => onLost(session, why);
    game.nActions = discrete ? Number(action.n) : 0;
    game.start = discrete ? Number(action.start ?? 0) : 0;
    game.meanings = Array.isArray(action.meanings) && action.meanings.length === game.nActions ? action.meanings.map(String) : [];
    buildActions();
    ui.actions.hidden = !discrete;
    ui.actionHint.hidden = !discrete;
    ui.actionForm.hidden = discrete;
    ui.actionInput.replaceChildren(...(discrete ? [] : [game.input.node]));
    ui.stat.session.textContent = opened.session_id;
    const name = opened.spec.game ?? opened.spec.env ?? "session";
    ui.conn.textContent = `${name} · ${opened.session_id.slice(0, 8)}`;
    await resetEpisode();
    ui.screen.focus();
    setPlaying(!ui.startPaused.checked);
  } catch (err) {
    if (session !== undefined && game.session !== session) session.close();
    fail(err);
  }
}

// ----------------------------------------------------------------- input

const STEER = new Set(["ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight", "Space"]);
const typing = (target) => ["INPUT", "SELECT", "TEXTAREA"].includes(target.tagName) && target.type !== "radio" && target.type !== "checkbox";

window.addEventListener("keydown", (event) => {
  if (typing(event.target) || event.ctrlKey || event.metaKey || event.altKey) return;
  if (STEER.has(event.code) && game.input === null) {
    event.preventDefault(); // no page scrolling, no button presses
    const fresh = !game.held.has(event.code);
    game.held.add(event.code);
    if (fresh && !game.playing && game.running) stepOnce(keyboardAction());
  } else if (event.code === "KeyP" && game.session !== null) {
    setPlaying(!game.playing);
  } else if (event.code === "KeyR" && game.session !== null) {
    ui.reset.click();
  }
});
window.addEventListener("keyup", (event) => {
  if (STEER.has(event.code)) {
    game.held.delete(event.code);
    if (!typing(event.target)) event.preventDefault();
  }
});
window.addEventListener("blur", () => game.held.clear());

ui.form.addEventListener("submit", startSession);
ui.play.addEventListener("click", () => setPlaying(!game.playing));
ui.step.addEventListener("click", () => {
  if (!game.playing) stepOnce(chooseAction);
});
ui.reset.addEventListener("click", async () => {
  const wasPlaying = game.playing;
  game.loopToken++;
  try {
    await resetEpisode();
    setStatus("New episode.");
    setPlaying(wasPlaying || game.playing);
  } catch (err) {
    fail(err);
  }
});
ui.stop.addEventListener("click", async () => {
  await closeSession();
  setStatus("Session closed.");
});
ui.actions.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-action]");
  if (button === null) return;
  const a = Number(button.dataset.action);
  if (game.playing) game.queued = a;
  else stepOnce(a);
  ui.screen.focus();
});
ui.actionForm.addEventListener("submit", (event) => {
  event.preventDefault();
  if (game.input === null) return;
  try {
    const a = game.input.read();
    if (game.playing) game.queued = a;
    else stepOnce(a);
  } catch (err) {
    fail(err);
  }
});
ui.scale.addEventListener("change", () => screen.rescale(Number(ui.scale.value)));
window.addEventListener("pagehide", () => game.session?.ws.close(1000));

// ----------------------------------------------------------------- start-up

function fillSelect(select, values, chosen) {
  select.replaceChildren(...values.map((v) => new Option(v, v, false, v === chosen)));
}

async function init() {
  let info = { games: [], obs_types: [], defaults: {} };
  try {
    const response = await fetch("info", { cache: "no-store" });
    if (response.ok) info = await response.json();
  } catch {
    // no info route: a generic page, the config comes from the extra field
  }
  game.wsPath = info.ws_path ?? "/ws";
  const params = new URLSearchParams(location.search);
  fillSelect(ui.game, info.games, params.get("game") ?? info.defaults.game);
  fillSelect(ui.obsType, info.obs_types, params.get("obs_type") ?? info.defaults.obs_type);
  ui.gameField.hidden = info.games.length === 0;
  ui.obsField.hidden = info.obs_types.length === 0;
  if (info.games.length === 0) ui.extra.closest("details").open = true;
  setControls(false);
  draw(new NDArray("uint8", [210, 160, 3], new Uint8Array(210 * 160 * 3)));
  document.body.dataset.ready = "true";
}

init();
