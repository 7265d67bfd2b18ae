import { describe, expect, it } from 'vitest';
import { boxesFromMap, connectedOutlines, readingOrder, type ProbabilityMap } from '../../../../../src/agent/engines/onnx/ocr/db-postprocess.js';
import type { Quad } from '../../../../../src/agent/engines/onnx/ocr/geometry.js';

/** A map of `width` × `height` with the given rectangles at probability `p` (x0, y0, x1, y1 inclusive). */
function mapWith(width: number, height: number, rects: [number, number, number, number, number][]): ProbabilityMap {
  const data = new Float32Array(width * height);
  for (const [x0, y0, x1, y1, p] of rects) for (let y = y0; y <= y1; y++) for (let x = x0; x <= x1; x++) data[y * width + x] = p;
  return { data, offset: 0, stride: width, width, height };
}

describe('DB post-processing', () => {
  it('finds each 8-connected region once, its outline only', () => {
    const map = mapWith(20, 10, [[1, 1, 5, 3, 0.9], [6, 4, 8, 5, 0.9], [12, 1, 18, 8, 0.9]]);
    const outlines = connectedOutlines(map, 0.3);
    // The first two touch at a corner (5,3)–(6,4): one region, as OpenCV's contours would join them.
    expect(outlines).toHaveLength(2);
    const big = outlines[1]!;
    expect(big.length).toBe(2 * 7 + 2 * 6); // the border of a 7 × 8 block
  });

  it('turns a confident region into a box grown by the unclip distance and scaled to the source picture', () => {
    // A 40 × 8 line at (10, 10) on a 64 × 32 map, read from a picture twice the size.
    const map = mapWith(64, 32, [[10, 10, 49, 17, 0.95]]);
    const [found] = boxesFromMap(map, 128, 64);
    expect(found!.score).toBeCloseTo(0.95, 2);
    // The fitted box is 39 × 7 (pixel centres); unclip grows it by 39·7·1.5 / 92 ≈ 4.45 on each side.
    const d = (39 * 7 * 1.5) / 92;
    const [tl, tr, br, bl] = found!.box;
    expect(tl[0]).toBeCloseTo(Math.round((10 - d) * 2), -0.5);
    expect(tr[0]).toBeCloseTo(Math.round((49 + d) * 2), -0.5);
    expect(tl[1]).toBeCloseTo(Math.round((10 - d) * 2), -0.5);
    expect(bl[1]).toBeCloseTo(Math.round((17 + d) * 2), -0.5);
    expect(br).toEqual([tr[0], bl[1]]);
  });

  it('drops regions the map is unsure of, and slivers', () => {
    const map = mapWith(64, 32, [[2, 2, 30, 9, 0.45], [2, 20, 40, 21, 0.99]]);
    expect(boxesFromMap(map, 64, 32)).toEqual([]);
  });

  it('reads only its own window of a batch\'s map', () => {
    const batch = mapWith(64, 64, [[4, 4, 40, 12, 0.9], [4, 36, 40, 44, 0.9]]);
    const second = boxesFromMap({ ...batch, offset: 32 * 64, height: 32 }, 64, 32);
    expect(second).toHaveLength(1);
    expect(second[0]!.box[0][1]).toBeLessThan(8);
  });

  it('orders boxes by line, then left to right within a line', () => {
    const box = (x: number, y: number): { box: Quad } => ({ box: [[x, y], [x + 10, y], [x + 10, y + 5], [x, y + 5]] });
    const ordered = readingOrder([box(50, 42), box(0, 40), box(0, 0), box(30, 3)]);
    expect(ordered.map((entry) => entry.box[0])).toEqual([[0, 0], [30, 3], [0, 40], [50, 42]]);
  });
});
