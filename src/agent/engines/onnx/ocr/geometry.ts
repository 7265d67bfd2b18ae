/**
 * Plane geometry for text boxes: convex hulls, the smallest rectangle around points (any rotation), and the outward
 * offset of a convex polygon (DB's "unclip"). Points are [x, y] in pixels; y grows downwards, as in pictures.
 */
export type Point = readonly [number, number];
/** Four corners: top-left, top-right, bottom-right, bottom-left (as the text reads). */
export type Quad = readonly [Point, Point, Point, Point];

export const distance = (a: Point, b: Point): number => Math.hypot(b[0] - a[0], b[1] - a[1]);

const cross = (o: Point, a: Point, b: Point): number => (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0]);

/** The convex hull, counter-clockwise in maths orientation (Andrew's monotone chain); collinear points dropped. */
export function convexHull(points: readonly Point[]): Point[] {
  const sorted = [...points].sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  if (sorted.length <= 2) return sorted;
  const lower: Point[] = [];
  for (const point of sorted) {
    while (lower.length >= 2 && cross(lower.at(-2)!, lower.at(-1)!, point) <= 0) lower.pop();
    lower.push(point);
  }
  const upper: Point[] = [];
  for (let i = sorted.length - 1; i >= 0; i--) {
    const point = sorted[i]!;
    while (upper.length >= 2 && cross(upper.at(-2)!, upper.at(-1)!, point) <= 0) upper.pop();
    upper.push(point);
  }
  return lower.slice(0, -1).concat(upper.slice(0, -1));
}

/** The area of a simple polygon (shoelace; positive whatever the orientation). */
export function polygonArea(polygon: readonly Point[]): number {
  let twice = 0;
  for (let i = 0; i < polygon.length; i++) {
    const a = polygon[i]!;
    const b = polygon[(i + 1) % polygon.length]!;
    twice += a[0] * b[1] - b[0] * a[1];
  }
  return Math.abs(twice) / 2;
}

export function polygonPerimeter(polygon: readonly Point[]): number {
  let length = 0;
  for (let i = 0; i < polygon.length; i++) {
    const a = polygon[i]!;
    const b = polygon[(i + 1) % polygon.length]!;
    length += Math.hypot(b[0] - a[0], b[1] - a[1]);
  }
  return length;
}

/**
 * The smallest-area rectangle holding the points (rotating calipers: one side of the best rectangle lies along an edge
 * of the hull), as its four corners in reading order, with its two side lengths. Degenerate input (one point, a line)
 * gives a rectangle of zero width or height.
 */
export function minAreaRect(points: readonly Point[]): { quad: Quad; width: number; height: number } {
  const hull = convexHull(points);
  // An invariant: regions hold at least one pixel.
  if (hull.length === 0) throw new Error('minAreaRect of no points');
  let best = { area: Infinity, ux: 1, uy: 0, minU: 0, maxU: 0, minV: 0, maxV: 0 };
  const edges = hull.length === 1 ? 1 : hull.length;
  for (let i = 0; i < edges; i++) {
    const a = hull[i]!;
    const b = hull[(i + 1) % hull.length]!;
    const length = Math.hypot(b[0] - a[0], b[1] - a[1]);
    const ux = length > 0 ? (b[0] - a[0]) / length : 1;
    const uy = length > 0 ? (b[1] - a[1]) / length : 0;
    let minU = Infinity, maxU = -Infinity, minV = Infinity, maxV = -Infinity;
    for (const [x, y] of hull) {
      const u = x * ux + y * uy;
      const v = -x * uy + y * ux;
      minU = Math.min(minU, u); maxU = Math.max(maxU, u); minV = Math.min(minV, v); maxV = Math.max(maxV, v);
    }
    const area = (maxU - minU) * (maxV - minV);
    if (area < best.area - 1e-9) best = { area, ux, uy, minU, maxU, minV, maxV };
  }
  const { ux, uy, minU, maxU, minV, maxV } = best;
  const at = (u: number, v: number): Point => [u * ux - v * uy, u * uy + v * ux];
  const corners = [at(minU, minV), at(maxU, minV), at(maxU, maxV), at(minU, maxV)];
  const quad = orderQuad(corners);
  // Width along the reading direction (the top edge), height down the left edge.
  return { quad, width: distance(quad[0], quad[1]), height: distance(quad[0], quad[3]) };
}

/**
 * Four corners of a rectangle in reading order: the two leftmost (by x) are the left side, the upper of them
 * top-left; likewise on the right. (The order PaddleOCR's box ordering gives, so crops come out the same way up.)
 */
export function orderQuad(corners: readonly Point[]): Quad {
  const byX = [...corners].sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  const [l1, l2, r1, r2] = byX as [Point, Point, Point, Point];
  const [topLeft, bottomLeft] = l1[1] <= l2[1] ? [l1, l2] : [l2, l1];
  const [topRight, bottomRight] = r1[1] <= r2[1] ? [r1, r2] : [r2, r1];
  return [topLeft, topRight, bottomRight, bottomLeft];
}

/**
 * A convex polygon grown outwards by `by` pixels, with round corners (each corner an arc of `arcSteps` points per
 * right angle): what a polygon offset with round joins (Clipper's JT_ROUND, which PaddleOCR calls through pyclipper)
 * gives for a convex polygon. DB post-processing only ever offsets the rectangle it fitted, which is convex; a concave
 * polygon would need a general offsetting library.
 */
export function offsetConvex(polygon: readonly Point[], by: number, arcSteps = 8): Point[] {
  const hull = convexHull(polygon);
  if (hull.length < 3) return hull;
  const out: Point[] = [];
  const n = hull.length;
  for (let i = 0; i < n; i++) {
    const previous = hull[(i + n - 1) % n]!;
    const corner = hull[i]!;
    const next = hull[(i + 1) % n]!;
    // The hull is counter-clockwise in (x, y) maths orientation: an edge's outward normal is its direction turned clockwise.
    const normal = (a: Point, b: Point): [number, number] => {
      const length = Math.hypot(b[0] - a[0], b[1] - a[1]) || 1;
      return [(b[1] - a[1]) / length, -(b[0] - a[0]) / length];
    };
    const from = normal(previous, corner);
    const to = normal(corner, next);
    const start = Math.atan2(from[1], from[0]);
    let end = Math.atan2(to[1], to[0]);
    while (end < start) end += 2 * Math.PI;
    // Around a convex corner the normals turn the way the hull runs: from the incoming edge's to the outgoing one's.
    const sweep = end - start;
    const steps = Math.max(1, Math.ceil((sweep / (Math.PI / 2)) * arcSteps));
    for (let s = 0; s <= steps; s++) {
      const angle = start + (sweep * s) / steps;
      out.push([corner[0] + by * Math.cos(angle), corner[1] + by * Math.sin(angle)]);
    }
  }
  return out;
}
