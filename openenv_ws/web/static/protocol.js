// Protocol v1 for the browser: the frame tables of protocol/SPEC.md (wire.js,
// generated from the Python declaration by protocol/make_js.py) checked here,
// over the MessagePack codec of msgpack.js (whose names it exports too, for
// the page and for tests/web/, which runs the golden vectors of
// protocol/vectors/ through it under Node).
import { Float, NDArray, ProtocolError, Writer, decode, isMap, newMap, writeFloat, writeValue } from "./msgpack.js";
import { CLIENT_OPS, DEFAULT_MAX_FRAME_SIZE as DEFAULT_MAX_CLIENT_FRAME_SIZE, DEFAULT_MAX_SERVER_FRAME_SIZE, MAX_CODECS, MAX_CODEC_NAME, MAX_DEPTH as MAX_VALUE_DEPTH, MAX_ID, MAX_NUM_ENVS, MAX_SPEC_DEPTH, PALETTE_BYTES, SERVER_OPS } from "./wire.js";

export { EXT_NDARRAY, Float, MAX_FRAME_DEPTH, MAX_NDIM, NDArray, ProtocolError, decode, encode, isMap, typedArrayFor } from "./msgpack.js";
export { DEFAULT_MAX_SERVER_FRAME_SIZE, MAX_ID, MAX_NUM_ENVS, MAX_SPEC_DEPTH, PROTOCOL_VERSION } from "./wire.js";
export { DEFAULT_MAX_CLIENT_FRAME_SIZE, MAX_VALUE_DEPTH };

function describe(v) {
  if (v === null) return "nil";
  if (typeof v === "boolean" || typeof v === "bigint") return `${typeof v} ${v}`;
  if (typeof v === "number") return `${Number.isInteger(v) ? "int" : "float"} ${v}`;
  if (v instanceof Float) return `float ${v.value}`;
  if (typeof v === "string") return v.length <= 20 ? `str ${JSON.stringify(v)}` : "str";
  if (v instanceof NDArray) return "array";
  if (v instanceof Uint8Array) return "bin";
  if (Array.isArray(v)) return "list";
  return "map";
}

const bad = (name, want, v) => new ProtocolError(`field '${name}' must be ${want}, got ${describe(v)}`, "bad_request");
const isInt = (v) => (typeof v === "number" && Number.isInteger(v)) || typeof v === "bigint";

// A free-form value: checks the nesting limit and, unless floats stay
// wrapped, turns Float objects back into numbers.
function plain(name, v, depth, keep, limit = MAX_VALUE_DEPTH) {
  if (v instanceof Float) return keep ? v : v.value;
  if (Array.isArray(v) || isMap(v)) {
    if (depth > limit) {
      throw new ProtocolError(`field '${name}' nests lists/maps deeper than ${limit} levels`, "bad_request");
    }
    if (Array.isArray(v)) {
      for (let i = 0; i < v.length; i++) v[i] = plain(name, v[i], depth + 1, keep, limit);
    } else {
      for (const k of Object.keys(v)) v[k] = plain(name, v[k], depth + 1, keep, limit);
    }
  }
  return v;
}

// A batch column: a 1-d array of exactly `dtype`.
function rows(n, v, dtype) {
  const want = `a 1-d array of ${dtype}`;
  if (!(v instanceof NDArray)) throw bad(n, want, v);
  if (v.shape.length !== 1 || v.dtype !== dtype) {
    throw new ProtocolError(`field '${n}' must be ${want}, got an array of ${v.dtype} and shape [${v.shape.join(", ")}]`, "bad_request");
  }
  return v;
}

// Field checks: (name, value, keepFloats) -> the field's value, or throw bad_request.
const CHECKS = {
  uint32: (n, v) => {
    if (!isInt(v) || v < 0 || v > MAX_ID) throw bad(n, `an integer in 0..${MAX_ID}`, v);
    return v;
  },
  optUint: (n, v) => {
    if (v !== null && (!isInt(v) || v < 0)) throw bad(n, "a non-negative integer", v);
    return v;
  },
  bool: (n, v) => {
    if (typeof v !== "boolean") throw bad(n, "a boolean", v);
    return v;
  },
  str: (n, v) => {
    if (typeof v !== "string") throw bad(n, "a string", v);
    return v;
  },
  optStr: (n, v) => {
    if (v !== null && typeof v !== "string") throw bad(n, "a string", v);
    return v;
  },
  bin: (n, v) => {
    if (!(v instanceof Uint8Array)) throw bad(n, "binary data", v);
    return v;
  },
  optPalette: (n, v) => {
    if (v === null) return v;
    const want = `nil or ${PALETTE_BYTES} bytes of binary data (256 RGB triples)`;
    if (!(v instanceof Uint8Array)) throw bad(n, want, v);
    if (v.length !== PALETTE_BYTES) throw new ProtocolError(`field '${n}' must be ${want}, got ${v.length} bytes`, "bad_request");
    return v;
  },
  codecs: (n, v) => {
    const want = `a list of at most ${MAX_CODECS} codec names (strings of up to ${MAX_CODEC_NAME} characters)`;
    if (v === null) return [];
    if (!Array.isArray(v) || v.length > MAX_CODECS) throw bad(n, want, v);
    for (const item of v) if (typeof item !== "string" || item.length > MAX_CODEC_NAME) throw bad(n, want, item);
    return v;
  },
  codec: (n, v) => {
    if (v === null || (typeof v === "string" && v.length <= MAX_CODEC_NAME)) return v;
    throw bad(n, `nil or a codec name (a string of up to ${MAX_CODEC_NAME} characters)`, v);
  },
  optArray: (n, v) => {
    if (v !== null && !(v instanceof NDArray)) throw bad(n, "an array (ext type 1) or nil", v);
    return v;
  },
  map: (n, v, keep) => {
    if (!isMap(v)) throw bad(n, "a map", v);
    return plain(n, v, 1, keep);
  },
  spec: (n, v, keep) => {
    if (!isMap(v)) throw bad(n, "a map", v);
    return plain(n, v, 1, keep, MAX_SPEC_DEPTH);
  },
  mapOrNil: (n, v, keep) => (v === null ? newMap() : CHECKS.map(n, v, keep)),
  action: (n, v, keep) => {
    if (isInt(v) || v instanceof NDArray || typeof v === "string") return v;
    if (v instanceof Float) return keep ? v : v.value;
    if (Array.isArray(v) || isMap(v)) return plain(n, v, 1, keep);
    throw bad(n, "an integer, a number, a string, an array, a list or a map", v);
  },
  // A structured value (section 22): nil, a scalar, an array (ext type 1), or lists and maps of them.
  value: (n, v, keep) => plain(n, v, 1, keep),
  numEnvs: (n, v) => {
    if (v === null || (isInt(v) && v >= 1 && v <= MAX_NUM_ENVS)) return v;
    throw bad(n, `nil or an integer in 1..${MAX_NUM_ENVS}`, v);
  },
  intRows: (n, v) => {
    const want = "a 1-d array of an integer dtype or a list of integers";
    if (v instanceof NDArray) {
      if (v.shape.length !== 1 || !/^u?int/.test(v.dtype)) {
        throw new ProtocolError(`field '${n}' must be ${want}, got an array of ${v.dtype} and shape [${v.shape.join(", ")}]`, "bad_request");
      }
      return v;
    }
    if (!Array.isArray(v)) throw bad(n, want, v);
    for (const item of v) if (!isInt(item)) throw bad(n, want, item);
    return v;
  },
  optIntRows: (n, v) => (v === null ? v : CHECKS.intRows(n, v)),
  actionRows: (n, v) => {
    if (!(v instanceof NDArray)) return CHECKS.intRows(n, v);
    if (v.shape.length === 0 || !/^(u?int|float|bool)/.test(v.dtype)) {
      throw new ProtocolError(`field '${n}' must be a list of integers or an array of numbers with a row per env, got an array of ${v.dtype} and shape [${v.shape.join(", ")}]`, "bad_request");
    }
    return v;
  },
  float64Rows: (n, v) => rows(n, v, "float64"),
  boolRows: (n, v) => rows(n, v, "bool"),
  int32Rows: (n, v) => rows(n, v, "int32"),
  float: (n, v, keep) => {
    let x;
    if (v instanceof Float) x = v.value;
    else if (isInt(v)) x = Number(v);
    else throw bad(n, "a number", v);
    if (Number.isNaN(x)) throw bad(n, "a number (not NaN)", v);
    return keep ? new Float(x) : x;
  },
};

// Every check the generated tables name is here: a kind added in Python needs its check above.
for (const fields of [...Object.values(CLIENT_OPS), ...Object.values(SERVER_OPS)]) {
  for (const [name, check] of fields) if (!Object.hasOwn(CHECKS, check)) throw new Error(`protocol.js has no check '${check}' (field '${name}' in wire.js)`);
}

// A field's default from the tables; containers are made fresh for each frame.
const fresh = (d) => (Array.isArray(d) ? [] : isMap(d) ? newMap() : d);

const rowCount = (v) => (v instanceof NDArray ? v.shape[0] : v.length);

// Every value of a batch's info (nested maps too) is a column of `count` rows: an
// array with `count` on its first axis or a list of `count` items.
function infoColumns(info, count, path) {
  for (const [key, value] of Object.entries(info)) {
    if (isMap(value)) {
      infoColumns(value, count, `${path}.${key}`);
      continue;
    }
    let got = null;
    if (Array.isArray(value)) got = value.length;
    else if (value instanceof NDArray && value.shape.length > 0) got = value.shape[0];
    if (got !== count) {
      const has = got === null ? "no rows" : `${got} row${got === 1 ? "" : "s"}`;
      throw new ProtocolError(`column '${`${path}.${key}`.slice(0, 100)}' has ${has} and 'reward' ${count}; every column of a batch, info's included, has one row per env`, "bad_request");
    }
  }
}

// Checks across the fields of one frame, after each field's own check.
const CROSS = {
  open: (f) => {
    if (f.batch_size === null) return;
    if (f.num_envs === null) {
      throw new ProtocolError("field 'batch_size' needs 'num_envs' (it is the size of a vector session's batches)", "bad_request");
    }
    if (f.batch_size > f.num_envs) {
      throw new ProtocolError(`field 'batch_size' (${f.batch_size}) must be at most 'num_envs' (${f.num_envs})`, "bad_request");
    }
  },
  send: (f) => {
    if (f.env_ids !== null && rowCount(f.env_ids) !== rowCount(f.action)) {
      throw new ProtocolError(`field 'env_ids' has ${rowCount(f.env_ids)} entries and 'action' ${rowCount(f.action)}; send one env id per action`, "bad_request");
    }
  },
  batch: (f) => {
    const count = f.reward.shape[0];
    for (const name of ["terminated", "truncated", "env_id"]) {
      if (f[name].shape[0] !== count) {
        throw new ProtocolError(`field '${name}' has ${f[name].shape[0]} rows and 'reward' ${count}; every column of a batch has one row per env`, "bad_request");
      }
    }
    if (f.obs !== null && (f.obs.shape.length === 0 || f.obs.shape[0] !== count)) {
      throw new ProtocolError(`field 'obs' has shape [${f.obs.shape.join(", ")}]; a batch of ${count} rows needs ${count} observations on its first axis`, "bad_request");
    }
    infoColumns(f.info, count, "info");
  },
};

function encodeFrame(ops, frame) {
  const table = ops[frame.op];
  if (table === undefined) throw new ProtocolError(`op '${frame.op}' is unknown; known ops: ${Object.keys(ops).join(", ")}`, "unknown_op");
  const id = frame.id;
  const nilId = (id === null || id === undefined) && frame.op === "error" && ops === SERVER_OPS;
  if (!nilId && !(Number.isInteger(id) && id >= 0 && id <= MAX_ID)) {
    throw new ProtocolError(`frame id must be an integer in 0..${MAX_ID}, got ${id}`);
  }
  const w = new Writer(64);
  w.u8(0x80 | (table.length + 2));
  writeValue(w, "op");
  writeValue(w, frame.op);
  writeValue(w, "id");
  writeValue(w, nilId ? null : id);
  for (const [name, check, , fallback] of table) {
    let v = frame[name];
    if (v === undefined || (v === null && check === "mapOrNil")) v = fresh(fallback);
    writeValue(w, name);
    try {
      if (check === "float") {
        const x = Number(v instanceof Float ? v.value : v);
        if (typeof v === "boolean" || v === null || Number.isNaN(x)) throw new ProtocolError(`it must be a number (not NaN), got ${describe(v)}`);
        writeFloat(w, x);
      } else writeValue(w, v);
    } catch (err) {
      throw new ProtocolError(`field '${name}' of a '${frame.op}' frame cannot be encoded: ${err.message}`);
    }
  }
  return w.result();
}

function decodeFrame(ops, bytes, maxFrameSize, keepFloats, nilIdOp) {
  const data = bytes instanceof ArrayBuffer ? new Uint8Array(bytes) : bytes;
  if (data.length > maxFrameSize) {
    throw new ProtocolError(`frame of ${data.length} bytes is above the limit of ${maxFrameSize} bytes`, "too_big");
  }
  const raw = decode(data, { wrapFloats: true });
  if (!isMap(raw)) throw new ProtocolError(`frame must be a MessagePack map, got ${describe(raw)}`);
  const { op, id } = raw;
  if (typeof op !== "string") throw new ProtocolError("frame has no string field 'op'");
  const table = Object.hasOwn(ops, op) ? ops[op] : undefined;
  const nilId = (id === null || id === undefined) && op === nilIdOp;
  if (!nilId && !(typeof id === "number" && Number.isInteger(id) && id >= 0 && id <= MAX_ID)) {
    throw new ProtocolError(`frame has no field 'id' holding an integer in 0..${MAX_ID}`);
  }
  const rid = nilId ? null : id;
  if (table === undefined) {
    throw new ProtocolError(`op '${op}' is unknown; known ops: ${Object.keys(ops).join(", ")}`, "unknown_op", rid);
  }
  const frame = { op, id: rid };
  try {
    for (const [name, check, required, fallback] of table) {
      if (Object.hasOwn(raw, name)) frame[name] = CHECKS[check](name, raw[name], keepFloats);
      else if (required) throw new ProtocolError(`op '${op}' needs field '${name}'`, "bad_request");
      else frame[name] = fresh(fallback);
    }
    if (Object.hasOwn(CROSS, op)) CROSS[op](frame);
  } catch (err) {
    err.id = rid;
    throw err;
  }
  return frame;
}

/** Encode a request (client frame) `{op, id, ...fields}` canonically; absent fields take their defaults. */
export const encodeRequest = (frame) => encodeFrame(CLIENT_OPS, frame);
/** Encode a reply (server frame) canonically; float fields are always float64. */
export const encodeReply = (frame) => encodeFrame(SERVER_OPS, frame);

/**
 * Decode a reply (server frame) into `{op, id, ...fields}`, every field
 * present. Throws ProtocolError with `code` (`too_big`, `bad_frame`,
 * `unknown_op`, `bad_request`) and `id` when it could be read.
 */
export function decodeReply(bytes, { maxFrameSize = DEFAULT_MAX_SERVER_FRAME_SIZE, keepFloats = false } = {}) {
  return decodeFrame(SERVER_OPS, bytes, maxFrameSize, keepFloats, "error");
}

/** Decode a request (client frame); what a server does, kept here so the vectors test both sides. */
export function decodeRequest(bytes, { maxFrameSize = DEFAULT_MAX_CLIENT_FRAME_SIZE, keepFloats = false } = {}) {
  return decodeFrame(CLIENT_OPS, bytes, maxFrameSize, keepFloats, null);
}
