// Runs the page's protocol codec (openenv_ws/web/static/protocol.js) over
// cases built from the golden vectors by test_web_codec.py and prints what
// it produced, as JSON in the vectors' value notation.
//
// usage: node codec_vectors.mjs PROTOCOL_JS CASES_JSON
// Big integers travel as {"$int": "digits"} both ways (JSON numbers lose them).
// PROTOCOL_JS sits in a folder whose package.json says "type": "module" (the
// test copies the page's modules there), so that it and the modules it imports
// load as ES modules under any Node version.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const [protocolPath, casesPath] = process.argv.slice(2);
const P = await import(pathToFileURL(protocolPath).href);

const fromHex = (hex) => Uint8Array.from(Buffer.from(hex, "hex"));
const toHex = (bytes) => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("hex");

function fromNote(note) {
  if (note === null || typeof note !== "object") return note;
  if (Array.isArray(note)) return note.map(fromNote);
  const keys = Object.keys(note);
  if (keys.length === 1 && keys[0] === "$int") return BigInt(note.$int);
  if (keys.length === 1 && keys[0] === "$float") {
    const x = note.$float;
    return new P.Float(x === "nan" ? NaN : x === "inf" ? Infinity : x === "-inf" ? -Infinity : x);
  }
  if (keys.length === 1 && keys[0] === "$bin") return fromHex(note.$bin);
  if (keys.length === 1 && keys[0] === "$array") {
    const { dtype, shape, hex } = note.$array;
    const bytes = fromHex(hex);
    // An NDArray's data is a typed array; reading the raw bytes back gives the same payload.
    const sizes = { bool: 1, uint8: 1, int8: 1, uint16: 2, int16: 2, uint32: 4, int32: 4, uint64: 8, int64: 8, float16: 2, float32: 4, float64: 8 };
    const Typed = { 1: Uint8Array, 2: Uint16Array, 4: Uint32Array, 8: BigUint64Array }[sizes[dtype]];
    const aligned = bytes.slice();
    return new P.NDArray(dtype, shape, new Typed(aligned.buffer, 0, aligned.length / sizes[dtype]));
  }
  const out = {};
  for (const k of keys) out[k] = fromNote(note[k]);
  return out;
}

function toNote(v) {
  if (v === null || typeof v === "boolean" || typeof v === "string") return v;
  if (typeof v === "bigint") return { $int: v.toString() };
  if (typeof v === "number") return Number.isInteger(v) ? v : { $number: v };
  if (v instanceof P.Float) {
    const x = v.value;
    return { $float: Number.isNaN(x) ? "nan" : x === Infinity ? "inf" : x === -Infinity ? "-inf" : x };
  }
  if (v instanceof P.NDArray) return { $array: { dtype: v.dtype, shape: v.shape, hex: toHex(v.bytes()), typed: v.data.constructor.name } };
  if (v instanceof Uint8Array) return { $bin: toHex(v) };
  if (Array.isArray(v)) return v.map(toNote);
  const out = {};
  for (const k of Object.keys(v)) out[k] = toNote(v[k]);
  return out;
}

function run(c) {
  switch (c.kind) {
    case "encode_frame":
      return { hex: toHex((c.direction === "client" ? P.encodeRequest : P.encodeReply)(fromNote(c.value))) };
    case "encode_value":
      return { hex: toHex(P.encode(fromNote(c.value))) };
    case "decode_frame": {
      const decodeFrame = c.direction === "client" ? P.decodeRequest : P.decodeReply;
      const options = { keepFloats: true };
      if (c.max_frame_size !== undefined) options.maxFrameSize = c.max_frame_size;
      return { value: toNote(decodeFrame(fromHex(c.hex), options)) };
    }
    case "decode_value":
      return { value: toNote(P.decode(fromHex(c.hex), { wrapFloats: true })) };
    default:
      throw new Error(`unknown case kind ${c.kind}`);
  }
}

const results = {};
for (const c of JSON.parse(readFileSync(casesPath, "utf8"))) {
  try {
    results[c.key] = run(c);
  } catch (err) {
    if (!(err instanceof P.ProtocolError)) {
      results[c.key] = { crash: `${err.name}: ${err.message}` };
    } else {
      results[c.key] = { error: { code: err.code, id: err.id, message: err.message } };
    }
  }
}
process.stdout.write(JSON.stringify(results));
