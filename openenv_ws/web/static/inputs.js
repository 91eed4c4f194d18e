// An action input built from an action space's wire form (opened.spec.action,
// SPEC section 22): `actionInput(space)` returns {node, read, sample} where
// `node` is the form to show, `read()` the action it holds now (as the codec
// sends it: integers, strings, NDArrays, lists and maps) and `sample()` a
// random action of the space, for the random agent.
import { Float, NDArray, isMap, typedArrayFor } from "./protocol.js";

/** Arrays with more elements than this get one JSON field instead of an input each. */
export const MAX_ELEMENT_INPUTS = 32;

const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null) continue;
    if (k === "text") node.textContent = v;
    else if (k in node && typeof v !== "string") node[k] = v;
    else node.setAttribute(k, v);
  }
  node.append(...children);
  return node;
};
const randInt = (lo, count) => lo + Math.floor(Math.random() * count);
const size = (shape) => shape.reduce((a, b) => a * b, 1);

/** Wraps a message so the page tells the user which field is wrong. */
export class InputError extends Error {}

function field(label, control) {
  return el("label", { class: "a-field" }, el("span", { class: "a-name", text: label }), control);
}

// --------------------------------------------------------------- arrays

const INT_DTYPE = /^u?int|^bool$/;

function bound(b, i) {
  if (b === null || b === undefined) return null;
  const v = b instanceof NDArray ? Number(b.data[i]) : Number(b);
  return Number.isFinite(v) ? v : null;
}

// Elements (JS numbers) -> an NDArray of `dtype` and `shape`.
function toArray(dtype, shape, values) {
  const Typed = typedArrayFor(dtype);
  if (Typed === undefined || dtype === "float16") throw new InputError(`arrays of dtype ${dtype} cannot be built here`);
  const big = Typed === BigInt64Array || Typed === BigUint64Array;
  return new NDArray(dtype, shape, Typed.from(values, (v) => (big ? BigInt(v) : v)));
}

// Numbers with their bounds, one input each (or a JSON list when there are many).
function numbers(dtype, shape, low, high, labels) {
  const n = size(shape);
  const integer = INT_DTYPE.test(dtype);
  const pick = (i) => {
    const lo = bound(low, i);
    const hi = bound(high, i);
    const a = lo ?? (hi === null ? -1 : hi - 2);
    const b = hi ?? a + 2;
    return integer ? randInt(Math.ceil(a), Math.floor(b) - Math.ceil(a) + 1) : a + Math.random() * (b - a);
  };
  const sample = () => toArray(dtype, shape, Array.from({ length: n }, (_, i) => pick(i)));
  const start = (i) => {
    const lo = bound(low, i);
    return lo !== null && lo > 0 ? lo : Math.min(0, bound(high, i) ?? 0);
  };
  if (n > MAX_ELEMENT_INPUTS) {
    const json = jsonTextarea(
      Array.from({ length: n }, (_, i) => start(i)),
      (values) => {
        const flat = Array.isArray(values) ? values.flat(Infinity) : null;
        if (flat === null || flat.length !== n || flat.some((v) => typeof v !== "number")) {
          throw new InputError(`give ${n} numbers (a flat or nested JSON list)`);
        }
        return toArray(dtype, shape, flat);
      },
    );
    const node = el("div", { class: "a-array" }, el("span", { class: "a-type", text: `${dtype} [${shape.join(", ")}], ${n} values` }), json.node);
    return { node, read: json.read, sample };
  }
  const boxes = [];
  const grid = el("div", { class: "a-elements" });
  for (let i = 0; i < n; i++) {
    const lo = bound(low, i);
    const hi = bound(high, i);
    const box = el("input", { type: "number", step: integer ? "1" : "any", min: lo === null ? null : String(lo), max: hi === null ? null : String(hi) });
    box.value = String(start(i));
    box.title = `${labels ? labels(i) : `[${i}]`} in ${lo ?? "-∞"}..${hi ?? "∞"}`;
    boxes.push(box);
    grid.append(labels ? field(labels(i), box) : box);
  }
  const read = () =>
    toArray(
      dtype,
      shape,
      boxes.map((box, i) => {
        const v = Number(box.value);
        if (box.value.trim() === "" || !Number.isFinite(v)) throw new InputError(`element ${i} is not a number`);
        if (integer && !Number.isInteger(v)) throw new InputError(`element ${i} must be an integer, got ${v}`);
        return v;
      }),
    );
  const node = el("div", { class: "a-array" }, el("span", { class: "a-type", text: `${dtype} [${shape.join(", ")}]` }), grid);
  return { node, read, sample };
}

function multiBinary(space) {
  const shape = space.shape;
  const n = size(shape);
  if (n > MAX_ELEMENT_INPUTS) return numbers("int8", shape, 0, 1);
  const boxes = Array.from({ length: n }, () => el("input", { type: "checkbox" }));
  const node = el("div", { class: "a-array" }, el("span", { class: "a-type", text: `multi_binary [${shape.join(", ")}]` }), el("div", { class: "a-elements" }, ...boxes.map((b, i) => field(`[${i}]`, b))));
  return {
    node,
    read: () => toArray("int8", shape, boxes.map((b) => (b.checked ? 1 : 0))),
    sample: () => toArray("int8", shape, boxes.map(() => randInt(0, 2))),
  };
}

function multiDiscrete(space) {
  const nvec = space.nvec instanceof NDArray ? space.nvec : new NDArray("int64", [space.nvec.length], BigInt64Array.from(space.nvec, BigInt));
  const n = nvec.data.length;
  const first = (i) => (space.start ? Number(space.start instanceof NDArray ? space.start.data[i] : space.start[i]) : 0);
  const low = new NDArray("float64", nvec.shape, Float64Array.from({ length: n }, (_, i) => first(i)));
  const high = new NDArray("float64", nvec.shape, Float64Array.from({ length: n }, (_, i) => first(i) + Number(nvec.data[i]) - 1));
  return numbers(space.dtype ?? "int64", nvec.shape, low, high);
}

// --------------------------------------------------------------- the rest

function discrete(space) {
  const start = Number(space.start ?? 0);
  const n = Number(space.n);
  const meanings = Array.isArray(space.meanings) ? space.meanings : [];
  const select = el("select", { class: "a-discrete" });
  for (let i = 0; i < n; i++) {
    const v = start + i;
    select.append(new Option(meanings[i] !== undefined ? `${v}: ${meanings[i]}` : String(v), String(v)));
  }
  return { node: select, read: () => Number(select.value), sample: () => randInt(start, n) };
}

function text(space) {
  const max = Number(space.max_length ?? 0);
  const min = Number(space.min_length ?? 0);
  const charset = typeof space.charset === "string" ? space.charset : "";
  const box = max > 80 ? el("textarea", { class: "a-text", rows: 3 }) : el("input", { class: "a-text", type: "text" });
  box.maxLength = max;
  box.spellcheck = false;
  const hint = `${min}..${max} characters${charset ? ` from ${JSON.stringify(charset.length > 40 ? `${charset.slice(0, 40)}…` : charset)}` : ""}`;
  box.placeholder = hint;
  const alphabet = charset || "abcdefghijklmnopqrstuvwxyz ";
  return {
    node: el("div", { class: "a-textfield" }, box, el("span", { class: "a-type", text: hint })),
    read: () => {
      const v = box.value;
      if ([...v].length < min) throw new InputError(`at least ${min} characters are needed`);
      return v;
    },
    sample: () => {
      const chars = [...alphabet];
      return Array.from({ length: randInt(min, Math.min(max, min + 8) - min + 1) }, () => chars[randInt(0, chars.length)]).join("");
    },
  };
}

function nested(entries, list) {
  const node = el("fieldset", { class: "a-group" });
  const parts = entries.map(([key, space]) => {
    const part = actionInput(space);
    node.append(field(list ? `[${key}]` : key, part.node));
    return [key, part];
  });
  const gather = (how) => {
    if (list) return parts.map(([, p]) => p[how]());
    const out = {};
    for (const [key, p] of parts) {
      try {
        out[key] = p[how]();
      } catch (err) {
        throw err instanceof InputError ? new InputError(`${key}: ${err.message}`) : err;
      }
    }
    return out;
  };
  return { node, read: () => gather("read"), sample: () => gather("sample") };
}

// A JSON field: `convert` checks what was typed and makes the action of it.
function jsonTextarea(initial, convert = (v) => v) {
  const box = el("textarea", { class: "a-json", rows: 4, spellcheck: "false" });
  box.value = JSON.stringify(initial, null, Array.isArray(initial) ? 0 : 1);
  const read = () => {
    let v;
    try {
      v = JSON.parse(box.value);
    } catch (err) {
      throw new InputError(`not valid JSON: ${err.message}`);
    }
    return convert(v);
  };
  return { node: box, read, sample: read };
}

// JSON Schema (a Pydantic model's): a field per property of a simple type.
function resolve(schema, root) {
  let s = schema ?? {};
  for (let hops = 0; typeof s.$ref === "string" && hops < 8; hops++) {
    const name = s.$ref.replace(/^#\/(\$defs|definitions)\//, "");
    s = { ...(root.$defs ?? root.definitions ?? {})[name], ...Object.fromEntries(Object.entries(s).filter(([k]) => k !== "$ref")) };
  }
  const options = s.anyOf ?? s.oneOf;
  if (Array.isArray(options)) {
    const real = options.filter((o) => o?.type !== "null");
    if (real.length === 1) return { ...resolve(real[0], root), default: s.default, title: s.title, description: s.description, nullable: true };
  }
  return s;
}

function property(schema, root, required) {
  const s = resolve(schema, root);
  const dflt = s.default;
  if (Array.isArray(s.enum)) {
    const select = el("select");
    if (!required) select.append(new Option("(none)", ""));
    s.enum.forEach((v, i) => select.append(new Option(String(v), String(i), false, v === dflt)));
    const value = () => (select.value === "" ? undefined : s.enum[Number(select.value)]);
    return { node: select, read: value, sample: () => s.enum[randInt(0, s.enum.length)] };
  }
  if (s.type === "boolean") {
    const box = el("input", { type: "checkbox", checked: dflt === true });
    return { node: box, read: () => box.checked, sample: () => Math.random() < 0.5 };
  }
  if (s.type === "string") {
    const box = el("input", { type: "text", spellcheck: "false", maxLength: s.maxLength, placeholder: s.description ?? "" });
    if (typeof dflt === "string") box.value = dflt;
    // Left empty, an optional field is left out (the model's default applies).
    const read = () => (box.value === "" && !required ? undefined : box.value);
    return { node: box, read, sample: read };
  }
  if (s.type === "integer" || s.type === "number") {
    const integer = s.type === "integer";
    const box = el("input", { type: "number", step: integer ? "1" : "any", min: s.minimum, max: s.maximum });
    if (typeof dflt === "number") box.value = String(dflt);
    const read = () => {
      if (box.value.trim() === "") {
        if (required) throw new InputError("a number is needed");
        return undefined;
      }
      const v = Number(box.value);
      if (integer && !Number.isInteger(v)) throw new InputError(`an integer is needed, got ${v}`);
      return integer ? v : new Float(v);
    };
    return { node: box, read, sample: read };
  }
  const json = jsonTextarea(dflt ?? (s.type === "array" ? [] : s.type === "object" ? {} : null));
  return json;
}

function jsonForm(space) {
  const schema = isMap(space.schema) ? space.schema : {};
  const root = resolve(schema, schema);
  const props = isMap(root.properties) ? root.properties : null;
  const mapCheck = (v) => {
    if (v === null || typeof v !== "object" || Array.isArray(v)) throw new InputError("the action must be a JSON object");
    return v;
  };
  if (props === null || Object.keys(props).length === 0) return jsonTextarea({}, mapCheck);
  const required = new Set(Array.isArray(root.required) ? root.required : []);
  const node = el("fieldset", { class: "a-group" });
  if (space.name) node.append(el("legend", { text: space.name }));
  const parts = Object.entries(props).map(([key, prop]) => {
    const part = property(prop, schema, required.has(key));
    const title = resolve(prop, schema).description;
    const label = field(required.has(key) ? `${key} *` : key, part.node);
    if (title) label.title = title;
    node.append(label);
    return [key, part];
  });
  const gather = (how) => {
    const out = {};
    for (const [key, part] of parts) {
      let v;
      try {
        v = part[how]();
      } catch (err) {
        throw err instanceof InputError ? new InputError(`${key}: ${err.message}`) : err;
      }
      if (v !== undefined) out[key] = v;
    }
    return out;
  };
  return { node, read: () => gather("read"), sample: () => gather("sample") };
}

/** The input for one space's wire form; an unknown space gets a JSON field. */
export function actionInput(space) {
  switch (space?.type) {
    case "discrete":
      return discrete(space);
    case "array":
      return numbers(space.dtype, space.shape, space.low, space.high);
    case "multi_discrete":
      return multiDiscrete(space);
    case "multi_binary":
      return multiBinary(space);
    case "text":
      return text(space);
    case "dict":
      return nested(Object.entries(space.spaces ?? {}), false);
    case "tuple":
      return nested((space.spaces ?? []).map((s, i) => [i, s]), true);
    case "json":
      return jsonForm(space);
    default:
      return jsonTextarea(0);
  }
}
