import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { convexHull, minAreaRect, offsetConvex, orderQuad, polygonArea, polygonPerimeter, type Point } from '../../../../../src/agent/engines/onnx/ocr/geometry.js';

const rotate = (points: readonly Point[], angle: number, [cx, cy]: Point = [0, 0]): Point[] =>
  points.map(([x, y]) => [cx + (x - cx) * Math.cos(angle) - (y - cy) * Math.sin(angle), cy + (x - cx) * Math.sin(angle) + (y - cy) * Math.cos(angle)]);

describe('OCR geometry', () => {
  it('a hull drops inner and collinear points', () => {
    const hull = convexHull([[0, 0], [2, 0], [4, 0], [4, 3], [0, 3], [1, 1], [2, 2]]);
    expect(hull).toHaveLength(4);
    expect(polygonArea(hull)).toBe(12);
  });

  it('the smallest rectangle of an upright box is the box, corners in reading order', () => {
    const { quad, width, height } = minAreaRect([[10, 20], [50, 20], [50, 30], [10, 30], [30, 25]]);
    expect(quad).toEqual([[10, 20], [50, 20], [50, 30], [10, 30]]);
    expect(width).toBeCloseTo(40);
    expect(height).toBeCloseTo(10);
  });

  it('finds a rotated rectangle from its points (property: any angle, the area and sides come back)', () => {
    fc.assert(fc.property(fc.double({ min: -0.6, max: 0.6, noNaN: true }), fc.integer({ min: 5, max: 200 }), fc.integer({ min: 3, max: 60 }), (angle, w, h) => {
      const corners: Point[] = [[0, 0], [w, 0], [w, h], [0, h]];
      const inner: Point[] = [[w / 2, h / 2], [w / 3, h / 4]];
      const { width, height } = minAreaRect(rotate([...corners, ...inner], angle, [100, 100]));
      expect(width * height).toBeCloseTo(w * h, 3);
      expect([width, height].sort((a, b) => a - b)[0]).toBeCloseTo(Math.min(w, h), 3);
    }));
  });

  it('orders corners top-left, top-right, bottom-right, bottom-left whatever order they come in', () => {
    expect(orderQuad([[5, 6], [0, 1], [5, 0], [0, 7]])).toEqual([[0, 1], [5, 0], [5, 6], [0, 7]]);
  });

  it('unclip: a rectangle grown by d with round corners has area A + P·d + π·d² and fits a rectangle d larger each side', () => {
    const rect: Point[] = [[0, 0], [40, 0], [40, 10], [0, 10]];
    const d = (polygonArea(rect) * 1.5) / polygonPerimeter(rect);
    const grown = offsetConvex(rect, d, 64);
    expect(polygonArea(grown)).toBeCloseTo(400 + 100 * d + Math.PI * d * d, 0);
    const { width, height } = minAreaRect(grown);
    expect(width).toBeCloseTo(40 + 2 * d, 1);
    expect(height).toBeCloseTo(10 + 2 * d, 1);
    // Every grown point is d from the rectangle, not nearer.
    for (const [x, y] of grown) {
      const dx = Math.max(0 - x, 0, x - 40), dy = Math.max(0 - y, 0, y - 10);
      expect(Math.hypot(dx, dy)).toBeCloseTo(d, 6);
    }
  });
});
