import type { Quad } from './geometry.js';
import type { Rgb } from './image.js';

/**
 * A copy of the picture with each box's outline drawn on it (`thickness` pixels, one colour), so a person sees what
 * was read where.
 */
export function drawBoxes(picture: Rgb, boxes: readonly Quad[], colour: readonly [number, number, number] = [230, 20, 60], thickness = 2): Rgb {
  const data = new Uint8Array(picture.data);
  const { width, height } = picture;
  const radius = Math.max(0, Math.floor((thickness - 1) / 2));
  const plot = (cx: number, cy: number): void => {
    for (let y = cy - radius; y <= cy + radius + ((thickness - 1) % 2); y++) {
      for (let x = cx - radius; x <= cx + radius + ((thickness - 1) % 2); x++) {
        if (x < 0 || y < 0 || x >= width || y >= height) continue;
        const o = (y * width + x) * 3;
        data[o] = colour[0]; data[o + 1] = colour[1]; data[o + 2] = colour[2];
      }
    }
  };
  for (const box of boxes) {
    for (let i = 0; i < 4; i++) {
      const [x0, y0] = box[i]!;
      const [x1, y1] = box[(i + 1) % 4]!;
      // Stepping one pixel at a time along the longer axis leaves no gaps.
      const steps = Math.max(1, Math.ceil(Math.max(Math.abs(x1 - x0), Math.abs(y1 - y0))));
      for (let s = 0; s <= steps; s++) plot(Math.round(x0 + ((x1 - x0) * s) / steps), Math.round(y0 + ((y1 - y0) * s) / steps));
    }
  }
  return { data, width, height };
}
