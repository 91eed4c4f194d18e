// A structured value (an observation or an info map) as a collapsible tree:
// maps and lists as <details> that keep their open/closed state from one step
// to the next, arrays with their dtype and shape (and their values when small,
// or as a picture when they look like one), scalars with their type.
import { NDArray, isMap } from "./protocol.js";
import { isImage, paint } from "./screen.js";

/** Arrays of at most this many elements show all their values. */
export const SHOWN_VALUES = 64;

const el = (tag, className, text) => {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
};

function scalar(v) {
  if (v === null) return el("span", "v-nil", "nil");
  if (typeof v === "boolean") return el("span", "v-bool", String(v));
  if (typeof v === "bigint") return el("span", "v-num", v.toString());
  if (typeof v === "number") {
    return el("span", "v-num", Number.isInteger(v) || !Number.isFinite(v) ? String(v) : String(Number(v.toPrecision(6))));
  }
  if (typeof v === "string") return el("span", "v-str", JSON.stringify(v));
  if (v instanceof Uint8Array) return el("span", "v-bin", `${v.length} bytes`);
  return el("span", "v-other", String(v));
}

function arrayValues(arr) {
  const n = arr.data.length;
  const shown = Array.from(arr.data.subarray(0, Math.min(n, SHOWN_VALUES)), (x) => {
    const v = typeof x === "bigint" ? x : Number(x);
    return arr.dtype === "bool" ? String(v !== 0) : scalar(v).textContent;
  });
  if (arr.shape.length === 2 && n <= SHOWN_VALUES) {
    const w = arr.shape[1];
    const rows = [];
    for (let i = 0; i < arr.shape[0]; i++) rows.push(`[${shown.slice(i * w, (i + 1) * w).join(", ")}]`);
    return `[${rows.join(", ")}]`;
  }
  return `[${shown.join(", ")}${n > SHOWN_VALUES ? `, … ${n - SHOWN_VALUES} more` : ""}]`;
}

function arrayNode(arr, label) {
  const line = el("div", "t-leaf t-array");
  line.append(label, el("span", "t-type", `${arr.dtype} [${arr.shape.join(", ")}]`));
  if (isImage(arr)) {
    const canvas = el("canvas", "t-image");
    canvas.width = arr.shape[1];
    canvas.height = arr.shape[0];
    const ctx = canvas.getContext("2d");
    const image = ctx.createImageData(canvas.width, canvas.height);
    paint(image, arr);
    ctx.putImageData(image, 0, 0);
    line.append(canvas);
  } else {
    line.append(el("span", "t-values", arrayValues(arr)));
  }
  return line;
}

/** Renders values under `root`, remembering which branches the user closed. */
export class Tree {
  constructor(root) {
    this.root = root;
    this.closed = new Set();
    root.addEventListener(
      "toggle",
      (event) => {
        const path = event.target.dataset?.path;
        if (path === undefined) return;
        if (event.target.open) this.closed.delete(path);
        else this.closed.add(path);
      },
      true,
    );
  }

  /** Show `value` (replacing what was shown). */
  show(value) {
    this.root.replaceChildren(this.node(value, "$", null));
  }

  node(value, path, key) {
    const label = el("span", "t-key", key === null ? "" : `${key}: `);
    if (value instanceof NDArray) return arrayNode(value, label);
    const list = Array.isArray(value);
    if (!list && !isMap(value)) {
      const line = el("div", "t-leaf");
      line.append(label, scalar(value));
      return line;
    }
    const keys = list ? value.map((_, i) => i) : Object.keys(value);
    const branch = el("details", "t-branch");
    branch.dataset.path = path;
    branch.open = !this.closed.has(path);
    const summary = el("summary");
    summary.append(label, el("span", "t-type", list ? `list of ${keys.length}` : `map of ${keys.length}`));
    branch.append(summary);
    const body = el("div", "t-body");
    for (const k of keys) body.append(this.node(value[k], `${path}/${k}`, list ? `[${k}]` : k));
    branch.append(body);
    return branch;
  }
}
