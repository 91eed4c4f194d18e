// MessagePack for protocol v1 in the browser: the canonical encoding of SPEC
// section 3, strict decoding and the ndarray extension (type 1, SPEC section
// 6). An ES module whose only dependency is the generated wire.js (the dtype
// codes); protocol.js builds the frames on it.
import { DTYPES as DTYPE_NAMES, EXT_NDARRAY, MAX_NDIM } from "./wire.js";

export { EXT_NDARRAY, MAX_NDIM };

/** Levels of lists/maps a whole frame may nest (the envelope is level 1). */
export const MAX_FRAME_DEPTH = 1024;

/** A frame could not be encoded or decoded; `code` is a wire error code. */
export class ProtocolError extends Error {
  constructor(message, code = "bad_frame", id = null) {
    super(message);
    this.name = "ProtocolError";
    this.code = code;
    this.id = id;
  }
}

/**
 * A float64 value. JavaScript has one number type, so an integral number
 * encodes as a MessagePack integer; wrap it in Float to send a float.
 */
export class Float {
  constructor(value) {
    this.value = Number(value);
  }
  valueOf() {
    return this.value;
  }
}

// The typed array holding each dtype's elements; float16 has none everywhere:
// its elements are the raw bits (Uint16Array).
const TYPED = { bool: Uint8Array, uint8: Uint8Array, int8: Int8Array, uint16: Uint16Array, int16: Int16Array, uint32: Uint32Array, int32: Int32Array, uint64: BigUint64Array, int64: BigInt64Array, float16: Uint16Array, float32: Float32Array, float64: Float64Array };
// dtype table of SPEC section 6: code -> [name, item size, typed array class].
const DTYPES = DTYPE_NAMES.map((name) => [name, TYPED[name].BYTES_PER_ELEMENT, TYPED[name]]);
const DTYPE_CODES = Object.fromEntries(DTYPES.map(([name], code) => [name, code]));
/** The typed array class holding the elements of `dtype` (undefined for a dtype not in the table). */
export const typedArrayFor = (dtype) => (dtype in DTYPE_CODES ? DTYPES[DTYPE_CODES[dtype]][2] : undefined);
const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/**
 * An n-dimensional array (ext type 1): `dtype` name, `shape` (array of
 * numbers, outermost first) and `data`, a typed array of the elements in C
 * order. Decoded arrays view the received message without copying when the
 * element bytes are aligned (always for uint8 observations).
 */
export class NDArray {
  constructor(dtype, shape, data) {
    if (!(dtype in DTYPE_CODES)) {
      throw new ProtocolError(`arrays of dtype ${dtype} cannot be sent; allowed: ${Object.keys(DTYPE_CODES).join(", ")}`);
    }
    this.dtype = dtype;
    this.shape = Array.from(shape, Number);
    this.data = data;
  }
  /** The element bytes (little-endian, C order), without copying. */
  bytes() {
    return new Uint8Array(this.data.buffer, this.data.byteOffset, this.data.byteLength);
  }
}

/** A plain object (what a MessagePack map decodes to). */
export const isMap = (v) => {
  if (v === null || typeof v !== "object") return false;
  const proto = Object.getPrototypeOf(v);
  return proto === null || proto === Object.prototype;
};
/** An empty map: an object with no prototype. */
export const newMap = () => Object.create(null);

// ----------------------------------------------------------------- encoding

const textEncoder = new TextEncoder();
const MIN_INT64 = -(2n ** 63n);
const MAX_UINT64 = 2n ** 64n - 1n;

/** A growing byte buffer that values are written into (see writeValue). */
export class Writer {
  constructor(size = 256) {
    this.buf = new Uint8Array(size);
    this.view = new DataView(this.buf.buffer);
    this.pos = 0;
  }
  reserve(n) {
    if (this.pos + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.pos + n) size *= 2;
    const buf = new Uint8Array(size);
    buf.set(this.buf.subarray(0, this.pos));
    this.buf = buf;
    this.view = new DataView(buf.buffer);
  }
  u8(v) {
    this.reserve(1);
    this.buf[this.pos++] = v;
  }
  u16(v) {
    this.reserve(2);
    this.view.setUint16(this.pos, v);
    this.pos += 2;
  }
  u32(v) {
    this.reserve(4);
    this.view.setUint32(this.pos, v);
    this.pos += 4;
  }
  bytes(b) {
    this.reserve(b.length);
    this.buf.set(b, this.pos);
    this.pos += b.length;
  }
  // A head byte plus a length, in the smallest of the 8/16/32-bit forms.
  sized(n, fix, fixMax, b8, b16, b32) {
    if (fix !== null && n <= fixMax) this.u8(fix | n);
    else if (b8 !== null && n <= 0xff) {
      this.u8(b8);
      this.u8(n);
    } else if (n <= 0xffff) {
      this.u8(b16);
      this.u16(n);
    } else if (n <= 0xffffffff) {
      this.u8(b32);
      this.u32(n);
    } else throw new ProtocolError(`a value of ${n} items or bytes is too large for MessagePack`);
  }
  result() {
    return this.buf.slice(0, this.pos);
  }
}

function writeInt(w, v) {
  // v: a safe integer Number or a BigInt within the 64-bit range.
  if (typeof v === "bigint") {
    if (v < MIN_INT64 || v > MAX_UINT64) {
      throw new ProtocolError(`integer ${v} is outside the 64-bit range MessagePack carries`);
    }
    if (v >= -(2n ** 31n) && v < 2n ** 32n) return writeInt(w, Number(v));
    w.reserve(9);
    if (v >= 0n) {
      w.buf[w.pos] = 0xcf;
      w.view.setBigUint64(w.pos + 1, v);
    } else {
      w.buf[w.pos] = 0xd3;
      w.view.setBigInt64(w.pos + 1, v);
    }
    w.pos += 9;
    return;
  }
  if (v >= 0) {
    if (v < 0x80) w.u8(v);
    else if (v <= 0xff) {
      w.u8(0xcc);
      w.u8(v);
    } else if (v <= 0xffff) {
      w.u8(0xcd);
      w.u16(v);
    } else if (v <= 0xffffffff) {
      w.u8(0xce);
      w.u32(v);
    } else writeInt(w, BigInt(v));
  } else if (v >= -32) w.u8(0x100 + v);
  else if (v >= -0x80) {
    w.u8(0xd0);
    w.u8(v & 0xff);
  } else if (v >= -0x8000) {
    w.u8(0xd1);
    w.u16(v & 0xffff);
  } else if (v >= -0x80000000) {
    w.u8(0xd2);
    w.u32(v >>> 0);
  } else writeInt(w, BigInt(v));
}

/** Write the number `v` as a float64. */
export function writeFloat(w, v) {
  w.reserve(9);
  w.buf[w.pos] = 0xcb;
  w.view.setFloat64(w.pos + 1, v);
  w.pos += 9;
}

function writeArrayExt(w, arr) {
  const code = DTYPE_CODES[arr.dtype];
  const ndim = arr.shape.length;
  if (ndim > MAX_NDIM) throw new ProtocolError(`arrays of ${ndim} dimensions cannot be sent; at most ${MAX_NDIM}`);
  const data = arr.bytes();
  const count = arr.shape.reduce((a, b) => a * b, 1);
  if (count * DTYPES[code][1] !== data.length) {
    throw new ProtocolError(`array of shape [${arr.shape}] and dtype ${arr.dtype} needs ${count * DTYPES[code][1]} bytes, its data has ${data.length}`);
  }
  if (!LITTLE_ENDIAN && DTYPES[code][1] > 1) throw new ProtocolError("multi-byte arrays need a little-endian host");
  const length = 2 + 4 * ndim + data.length;
  const fixext = { 1: 0xd4, 2: 0xd5, 4: 0xd6, 8: 0xd7, 16: 0xd8 }[length];
  if (fixext !== undefined) w.u8(fixext);
  else w.sized(length, null, 0, 0xc7, 0xc8, 0xc9);
  w.u8(EXT_NDARRAY);
  w.u8(code);
  w.u8(ndim);
  w.reserve(4 * ndim);
  for (const d of arr.shape) {
    if (!Number.isInteger(d) || d < 0 || d > 0xffffffff) throw new ProtocolError(`array dimension ${d} is not in 0..2**32-1`);
    w.view.setUint32(w.pos, d, true);
    w.pos += 4;
  }
  w.bytes(data);
}

/** Write one value in its canonical form. */
export function writeValue(w, v) {
  if (v === null) w.u8(0xc0);
  else if (v === false) w.u8(0xc2);
  else if (v === true) w.u8(0xc3);
  else if (typeof v === "number") {
    if (Number.isSafeInteger(v)) writeInt(w, v);
    else if (Number.isInteger(v) && Math.abs(v) < 2 ** 64) {
      throw new ProtocolError(`integer ${v} is not exact as a JavaScript number; pass a BigInt`);
    } else writeFloat(w, v);
  } else if (typeof v === "bigint") writeInt(w, v);
  else if (v instanceof Float) writeFloat(w, v.value);
  else if (typeof v === "string") {
    const b = textEncoder.encode(v);
    w.sized(b.length, 0xa0, 31, 0xd9, 0xda, 0xdb);
    w.bytes(b);
  } else if (v instanceof NDArray) writeArrayExt(w, v);
  else if (v instanceof Uint8Array || v instanceof ArrayBuffer) {
    const b = v instanceof ArrayBuffer ? new Uint8Array(v) : v;
    w.sized(b.length, null, 0, 0xc4, 0xc5, 0xc6);
    w.bytes(b);
  } else if (Array.isArray(v)) {
    w.sized(v.length, 0x90, 15, null, 0xdc, 0xdd);
    for (const item of v) writeValue(w, item);
  } else if (v instanceof Map) {
    w.sized(v.size, 0x80, 15, null, 0xde, 0xdf);
    for (const [key, item] of v) {
      if (typeof key !== "string") throw new ProtocolError(`map keys must be strings, got ${typeof key}`);
      writeValue(w, key);
      writeValue(w, item);
    }
  } else if (isMap(v)) {
    const keys = Object.keys(v);
    w.sized(keys.length, 0x80, 15, null, 0xde, 0xdf);
    for (const key of keys) {
      writeValue(w, key);
      writeValue(w, v[key]);
    }
  } else {
    const kind = v === undefined ? "undefined" : v.constructor?.name ?? typeof v;
    throw new ProtocolError(`values of type ${kind} cannot be encoded; use null, booleans, numbers, strings, Uint8Array, NDArray, arrays and plain objects`);
  }
}

/** Encode one value in the canonical form of SPEC section 3. */
export function encode(value) {
  const w = new Writer();
  writeValue(w, value);
  return w.result();
}

// ----------------------------------------------------------------- decoding

const textDecoder = new TextDecoder("utf-8", { fatal: true });

function decodeArrayPayload(bytes, start, length) {
  // bytes[start .. start+length) is the ext payload.
  if (length < 2) throw new ProtocolError(`array extension of ${length} bytes is shorter than its 2-byte header`);
  const code = bytes[start];
  const ndim = bytes[start + 1];
  if (code >= DTYPES.length) throw new ProtocolError(`array dtype code ${code} is unknown (0..${DTYPES.length - 1})`);
  if (ndim > MAX_NDIM) throw new ProtocolError(`array of ${ndim} dimensions; at most ${MAX_NDIM}`);
  const head = 2 + 4 * ndim;
  if (length < head) throw new ProtocolError(`array extension is cut inside its shape (${ndim} dimensions need ${head} header bytes, ${length} present)`);
  const view = new DataView(bytes.buffer, bytes.byteOffset + start + 2, 4 * ndim);
  const shape = [];
  let count = 1n;
  let nonzero = 1n;
  for (let i = 0; i < ndim; i++) {
    const d = view.getUint32(4 * i, true);
    shape.push(d);
    count *= BigInt(d);
    if (d !== 0) nonzero *= BigInt(d);
  }
  const [dtype, itemsize, Typed] = DTYPES[code];
  const size = BigInt(itemsize);
  const dataLength = length - head;
  if (count * size !== BigInt(dataLength)) {
    throw new ProtocolError(`array of shape [${shape}] and dtype ${dtype} needs ${count * size} data bytes, ${dataLength} present`);
  }
  if (nonzero * size >= 2n ** 63n) throw new ProtocolError(`zero-size array of shape [${shape}] is too large to exist`);
  const offset = bytes.byteOffset + start + head;
  if (code === 0) {
    for (let i = 0; i < dataLength; i++) {
      const b = bytes[start + head + i];
      if (b > 1) throw new ProtocolError(`bool array holds byte ${b}; bool elements are 0 or 1`);
    }
  }
  if (itemsize > 1 && !LITTLE_ENDIAN) throw new ProtocolError("multi-byte arrays need a little-endian host");
  const n = Number(count);
  let data;
  if (offset % itemsize === 0) data = new Typed(bytes.buffer, offset, n);
  else data = new Typed(bytes.slice(start + head, start + length).buffer, 0, n); // unaligned: copy
  return new NDArray(dtype, shape, data);
}

class Reader {
  constructor(bytes, wrapFloats) {
    this.bytes = bytes;
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.pos = 0;
    this.wrapFloats = wrapFloats;
  }
  need(n) {
    if (this.pos + n > this.bytes.length) throw new ProtocolError("frame cannot be decoded: it is truncated (the MessagePack data ends early)");
  }
  u8() {
    this.need(1);
    return this.bytes[this.pos++];
  }
  u16() {
    this.need(2);
    const v = this.view.getUint16(this.pos);
    this.pos += 2;
    return v;
  }
  u32() {
    this.need(4);
    const v = this.view.getUint32(this.pos);
    this.pos += 4;
    return v;
  }
  int64(signed) {
    this.need(8);
    const v = signed ? this.view.getBigInt64(this.pos) : this.view.getBigUint64(this.pos);
    this.pos += 8;
    return v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v;
  }
  float(width) {
    this.need(width);
    const v = width === 4 ? this.view.getFloat32(this.pos) : this.view.getFloat64(this.pos);
    this.pos += width;
    return this.wrapFloats ? new Float(v) : v;
  }
  str(n) {
    this.need(n);
    const b = this.bytes.subarray(this.pos, this.pos + n);
    this.pos += n;
    try {
      return textDecoder.decode(b);
    } catch {
      throw new ProtocolError("frame cannot be decoded: a string is not valid UTF-8");
    }
  }
  bin(n) {
    this.need(n);
    const b = this.bytes.subarray(this.pos, this.pos + n);
    this.pos += n;
    return b;
  }
  array(n, depth) {
    if (depth > MAX_FRAME_DEPTH) throw new ProtocolError(`frame cannot be decoded: it nests deeper than ${MAX_FRAME_DEPTH} levels`);
    // Every item takes at least one byte: refuse absurd counts before allocating.
    if (n > this.bytes.length - this.pos) throw new ProtocolError(`frame cannot be decoded: an array of ${n} items is longer than the frame`);
    const out = new Array(n);
    for (let i = 0; i < n; i++) out[i] = this.value(depth);
    return out;
  }
  map(n, depth) {
    if (depth > MAX_FRAME_DEPTH) throw new ProtocolError(`frame cannot be decoded: it nests deeper than ${MAX_FRAME_DEPTH} levels`);
    if (2 * n > this.bytes.length - this.pos) throw new ProtocolError(`frame cannot be decoded: a map of ${n} pairs is longer than the frame`);
    const out = newMap();
    for (let i = 0; i < n; i++) {
      const key = this.value(depth);
      if (typeof key !== "string") throw new ProtocolError("frame cannot be decoded: a map key is not a string; keys are strings");
      out[key] = this.value(depth);
    }
    return out;
  }
  ext(n) {
    this.need(1 + n);
    const type = this.view.getInt8(this.pos);
    this.pos += 1;
    if (type !== EXT_NDARRAY) throw new ProtocolError(`MessagePack extension type ${type} is not part of protocol v1`);
    const start = this.pos;
    this.pos += n;
    return decodeArrayPayload(this.bytes, start, n);
  }
  value(depth) {
    const b = this.u8();
    if (b < 0x80) return b;
    if (b < 0x90) return this.map(b & 0x0f, depth + 1);
    if (b < 0xa0) return this.array(b & 0x0f, depth + 1);
    if (b < 0xc0) return this.str(b & 0x1f);
    if (b >= 0xe0) return b - 0x100;
    switch (b) {
      case 0xc0: return null;
      case 0xc2: return false;
      case 0xc3: return true;
      case 0xc4: return this.bin(this.u8());
      case 0xc5: return this.bin(this.u16());
      case 0xc6: return this.bin(this.u32());
      case 0xc7: return this.ext(this.u8());
      case 0xc8: return this.ext(this.u16());
      case 0xc9: return this.ext(this.u32());
      case 0xca: return this.float(4);
      case 0xcb: return this.float(8);
      case 0xcc: return this.u8();
      case 0xcd: return this.u16();
      case 0xce: return this.u32();
      case 0xcf: return this.int64(false);
      case 0xd0: return (this.u8() << 24) >> 24;
      case 0xd1: return (this.u16() << 16) >> 16;
      case 0xd2: return this.u32() | 0;
      case 0xd3: return this.int64(true);
      case 0xd4: return this.ext(1);
      case 0xd5: return this.ext(2);
      case 0xd6: return this.ext(4);
      case 0xd7: return this.ext(8);
      case 0xd8: return this.ext(16);
      case 0xd9: return this.str(this.u8());
      case 0xda: return this.str(this.u16());
      case 0xdb: return this.str(this.u32());
      case 0xdc: return this.array(this.u16(), depth + 1);
      case 0xdd: return this.array(this.u32(), depth + 1);
      case 0xde: return this.map(this.u16(), depth + 1);
      case 0xdf: return this.map(this.u32(), depth + 1);
      default: throw new ProtocolError("frame cannot be decoded: it holds a byte that starts no MessagePack value (0xc1)");
    }
  }
}

/**
 * Decode exactly one MessagePack value. Maps become objects with a null
 * prototype, bin a Uint8Array view, ext type 1 an NDArray, integers beyond
 * 2**53 a BigInt. `wrapFloats`: floats become Float objects (so 1.0 stays
 * distinguishable from 1).
 */
export function decode(bytes, { wrapFloats = false } = {}) {
  const data = bytes instanceof ArrayBuffer ? new Uint8Array(bytes) : bytes;
  const r = new Reader(data, wrapFloats);
  const value = r.value(0);
  if (r.pos !== data.length) {
    throw new ProtocolError("frame cannot be decoded: it holds bytes after its MessagePack map; send one map per message");
  }
  return value;
}
