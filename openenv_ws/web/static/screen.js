// Observations on the page's canvas: an image (height x width x RGB or RGBA, or
// height x width grey levels) pixel for pixel, anything else (a vector such as
// the 128 bytes of Atari RAM) as a grid of cells, 16 per row, with a dump of
// its values beside it.
import { NDArray } from "./protocol.js";

// Values of any dtype as 0..255 bytes: uint8 as is, the rest stretched over their range.
export function asBytes(arr) {
  if (arr.dtype === "uint8") return arr.data;
  const values = Array.from(arr.data, Number);
  let lo = Infinity;
  let hi = -Infinity;
  for (const v of values) {
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  const span = hi > lo ? hi - lo : 1;
  return Uint8ClampedArray.from(values, (v) => ((v - lo) * 255) / span);
}

/** Whether `arr` is a picture: height x width x 3 or 4 channels, or a uint8 height x width grid of 8 x 8 or more. */
export function isImage(arr) {
  const s = arr.shape;
  if (s.length === 3) return (s[2] === 3 || s[2] === 4) && s[0] > 0 && s[1] > 0;
  return s.length === 2 && arr.dtype === "uint8" && s[0] >= 8 && s[1] >= 8;
}

/** Fill `image` (an ImageData of the array's width and height) with an image array's pixels. */
export function paint(image, arr) {
  const src = asBytes(arr);
  const px = image.data;
  const n = image.width * image.height;
  const c = arr.shape.length === 3 ? arr.shape[2] : 1;
  for (let i = 0, j = 0; i < n; i++, j += c) {
    px[4 * i] = src[j];
    px[4 * i + 1] = src[c === 1 ? j : j + 1];
    px[4 * i + 2] = src[c === 1 ? j : j + 2];
    px[4 * i + 3] = 255;
  }
}

// Rows of 16 values (hex for uint8), each after its offset.
function dump(obs) {
  const hex = obs.dtype === "uint8";
  const cells = Array.from(obs.data, (v) => (hex ? Number(v).toString(16).padStart(2, "0") : String(v)));
  const rows = [];
  for (let i = 0; i < cells.length; i += 16) {
    const offset = i.toString(16).padStart(4, "0");
    rows.push(`${offset}  ${cells.slice(i, i + 16).join(" ")}`);
  }
  return rows.join("\n");
}

export class Screen {
  /** Draws on `canvas`; `bytes` (a <pre>) shows the values of observations that are not images. */
  constructor(canvas, bytes) {
    this.canvas = canvas;
    this.bytes = bytes;
    this.ctx = canvas.getContext("2d");
    this.image = null;
  }

  imageData(w, h) {
    if (this.image === null || this.image.width !== w || this.image.height !== h) {
      this.canvas.width = w;
      this.canvas.height = h;
      this.image = this.ctx.createImageData(w, h);
    }
    return this.image;
  }

  /** Draw `obs` (an NDArray; anything else leaves the screen as it is), each pixel `scale` CSS pixels wide. */
  draw(obs, scale) {
    if (!(obs instanceof NDArray)) return;
    const shape = obs.shape;
    let w;
    let h;
    if ((shape.length === 3 && (shape[2] === 3 || shape[2] === 4)) || shape.length === 2) {
      [h, w] = shape;
      paint(this.imageData(w, h), obs);
    } else {
      const src = asBytes(obs);
      const n = src.length;
      w = Math.min(16, Math.max(1, n));
      h = Math.max(1, Math.ceil(n / w));
      const px = this.imageData(w, h).data;
      px.fill(0);
      for (let i = 0; i < n; i++) {
        px[4 * i] = px[4 * i + 1] = px[4 * i + 2] = src[i];
        px[4 * i + 3] = 255;
      }
      this.bytes.textContent = dump(obs);
    }
    this.bytes.hidden = shape.length === 2 || shape.length === 3;
    this.ctx.putImageData(this.image, 0, 0);
    this.rescale(scale);
  }

  /** Show what is drawn with pixels `scale` CSS pixels wide (the cells of a vector 8 times that). */
  rescale(scale) {
    if (this.image === null) return;
    const cell = this.bytes.hidden ? scale : 8 * scale;
    this.canvas.style.width = `${this.image.width * cell}px`;
    this.canvas.style.height = `${this.image.height * cell}px`;
  }
}
