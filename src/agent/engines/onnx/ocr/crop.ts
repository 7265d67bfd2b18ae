import { distance, type Point, type Quad } from './geometry.js';
import type { Rgb } from './image.js';

/**
 * The 3×3 homography taking (0,0), (w,0), (w,h), (0,h) to the quad's corners (a perspective map: a rotated or skewed
 * box becomes an upright rectangle), solved as the usual 8 × 8 linear system.
 */
export function homography(width: number, height: number, quad: Quad): number[] {
  const from: Point[] = [[0, 0], [width, 0], [width, height], [0, height]];
  const a: number[][] = [];
  const b: number[] = [];
  for (let i = 0; i < 4; i++) {
    const [x, y] = from[i]!;
    const [u, v] = quad[i]!;
    a.push([x, y, 1, 0, 0, 0, -u * x, -u * y]); b.push(u);
    a.push([0, 0, 0, x, y, 1, -v * x, -v * y]); b.push(v);
  }
  return [...solve(a, b), 1];
}

/** Gaussian elimination with partial pivoting; a singular system (a degenerate quad) gives zeros. */
function solve(a: number[][], b: number[]): number[] {
  const n = b.length;
  const m = a.map((row, i) => [...row, b[i]!]);
  for (let col = 0; col < n; col++) {
    let pivot = col;
    for (let row = col + 1; row < n; row++) if (Math.abs(m[row]![col]!) > Math.abs(m[pivot]![col]!)) pivot = row;
    if (Math.abs(m[pivot]![col]!) < 1e-12) return new Array<number>(n).fill(0);
    [m[col], m[pivot]] = [m[pivot]!, m[col]!];
    for (let row = 0; row < n; row++) {
      if (row === col) continue;
      const factor = m[row]![col]! / m[col]![col]!;
      for (let k = col; k <= n; k++) m[row]![k]! -= factor * m[col]![k]!;
    }
  }
  return m.map((row, i) => row[n]! / row[i]!);
}

/**
 * A text box cut out of the picture as an upright rectangle: as wide as its longer top/bottom edge and as tall as its
 * longer side, sampled through the perspective map (bilinear, edges repeated). A box at least 1.5 times taller than
 * wide is vertical text or a rotated line: it is turned a quarter counter-clockwise so it reads left to right.
 */
export function cropQuad(picture: Rgb, quad: Quad): Rgb {
  const width = Math.max(1, Math.round(Math.max(distance(quad[0], quad[1]), distance(quad[3], quad[2]))));
  const height = Math.max(1, Math.round(Math.max(distance(quad[0], quad[3]), distance(quad[1], quad[2]))));
  const h = homography(width, height, quad);
  const out = new Uint8Array(width * height * 3);
  const { data, width: sw, height: sh } = picture;
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      // Sample at the output pixel's centre.
      const px = x + 0.5, py = y + 0.5;
      const w = h[6]! * px + h[7]! * py + h[8]!;
      const sx = Math.min(sw - 1, Math.max(0, (h[0]! * px + h[1]! * py + h[2]!) / w - 0.5));
      const sy = Math.min(sh - 1, Math.max(0, (h[3]! * px + h[4]! * py + h[5]!) / w - 0.5));
      const x0 = Math.floor(sx), y0 = Math.floor(sy);
      const x1 = Math.min(sw - 1, x0 + 1), y1 = Math.min(sh - 1, y0 + 1);
      const fx = sx - x0, fy = sy - y0;
      const o = (y * width + x) * 3;
      for (let c = 0; c < 3; c++) {
        const top = data[(y0 * sw + x0) * 3 + c]! * (1 - fx) + data[(y0 * sw + x1) * 3 + c]! * fx;
        const bottom = data[(y1 * sw + x0) * 3 + c]! * (1 - fx) + data[(y1 * sw + x1) * 3 + c]! * fx;
        out[o + c] = Math.round(top * (1 - fy) + bottom * fy);
      }
    }
  }
  const crop = { data: out, width, height };
  return height / width >= 1.5 ? rotateCounterClockwise(crop) : crop;
}

/** A quarter turn counter-clockwise: the right column becomes the top row. */
export function rotateCounterClockwise(picture: Rgb): Rgb {
  const { data, width, height } = picture;
  const out = new Uint8Array(data.length);
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const to = ((width - 1 - x) * height + y) * 3;
      const from = (y * width + x) * 3;
      out[to] = data[from]!; out[to + 1] = data[from + 1]!; out[to + 2] = data[from + 2]!;
    }
  }
  return { data: out, width: height, height: width };
}
