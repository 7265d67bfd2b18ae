/** A decoded picture: 8-bit RGB, row by row (what the agent hands an engine for an `image` input). */
export interface Rgb {
  data: Uint8Array;
  width: number;
  height: number;
}

/**
 * Bilinear resampling with pixel centres at +0.5 (OpenCV's INTER_LINEAR without its fixed-point rounding, which is
 * what PaddleOCR resizes with): detection and recognition see the picture as the models were trained to.
 */
export function resizeRgb(source: Rgb, width: number, height: number): Rgb {
  const { data, width: sw, height: sh } = source;
  const out = new Uint8Array(width * height * 3);
  const sx = sw / width;
  const sy = sh / height;
  // Column weights are the same on every row: computed once.
  const x0 = new Int32Array(width);
  const x1 = new Int32Array(width);
  const fx = new Float32Array(width);
  for (let x = 0; x < width; x++) {
    const position = Math.min(sw - 1, Math.max(0, (x + 0.5) * sx - 0.5));
    x0[x] = Math.floor(position);
    x1[x] = Math.min(sw - 1, x0[x]! + 1);
    fx[x] = position - x0[x]!;
  }
  for (let y = 0; y < height; y++) {
    const position = Math.min(sh - 1, Math.max(0, (y + 0.5) * sy - 0.5));
    const y0 = Math.floor(position);
    const y1 = Math.min(sh - 1, y0 + 1);
    const fy = position - y0;
    const row0 = y0 * sw * 3;
    const row1 = y1 * sw * 3;
    for (let x = 0; x < width; x++) {
      const a = row0 + x0[x]! * 3, b = row0 + x1[x]! * 3, c = row1 + x0[x]! * 3, d = row1 + x1[x]! * 3;
      const wx = fx[x]!;
      const o = (y * width + x) * 3;
      for (let ch = 0; ch < 3; ch++) {
        const top = data[a + ch]! + (data[b + ch]! - data[a + ch]!) * wx;
        const bottom = data[c + ch]! + (data[d + ch]! - data[c + ch]!) * wx;
        out[o + ch] = Math.round(top + (bottom - top) * fy);
      }
    }
  }
  return { data: out, width, height };
}

/**
 * Write a picture into a batch tensor [N, 3, H, W] at image `index`, channels in BGR order (PaddleOCR's models were
 * trained on OpenCV's BGR pictures), each value (v / 255 − mean) / std. The tensor's other cells keep what they hold
 * (zeros: the padding of a smaller picture in a batch of larger ones).
 */
export function writeChw(
  tensor: Float32Array, index: number, tensorHeight: number, tensorWidth: number, picture: Rgb,
  mean: readonly [number, number, number], std: readonly [number, number, number],
): void {
  const plane = tensorHeight * tensorWidth;
  const base = index * 3 * plane;
  const { data, width, height } = picture;
  for (let c = 0; c < 3; c++) {
    const source = 2 - c; // B, G, R from R, G, B
    const scale = 1 / (255 * std[c]!);
    const offset = mean[c]! / std[c]!;
    const planeBase = base + c * plane;
    for (let y = 0; y < height; y++) {
      const row = planeBase + y * tensorWidth;
      const from = y * width * 3 + source;
      for (let x = 0; x < width; x++) tensor[row + x] = data[from + x * 3]! * scale - offset;
    }
  }
}
