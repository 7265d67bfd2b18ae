import { minAreaRect, offsetConvex, polygonArea, polygonPerimeter, type Point, type Quad } from './geometry.js';

/** DB (Differentiable Binarization) post-processing settings; the defaults are PaddleOCR's for PP-OCRv4. */
export interface DbOptions {
  /** A pixel is text where the probability map exceeds this. */
  threshold: number;
  /** A box is kept when the mean probability inside it reaches this. */
  boxThreshold: number;
  /** How far a box grows back out (DB predicts shrunk text regions): its area × ratio ÷ its perimeter. */
  unclipRatio: number;
  /** At most this many regions are looked at per picture. */
  maxCandidates: number;
}

export const DB_DEFAULTS: DbOptions = { threshold: 0.3, boxThreshold: 0.6, unclipRatio: 1.5, maxCandidates: 1000 };

/** Regions thinner than this (pixels of the map) are noise. */
const MIN_SIDE = 3;

export interface DetectedBox {
  /** Corners in the source picture's pixels, reading order (top-left, top-right, bottom-right, bottom-left). */
  box: Quad;
  /** The mean text probability inside the box, on the detector's map. */
  score: number;
}

/** One picture's probability map: a window (width × height) of a batch's map whose rows are `stride` wide. */
export interface ProbabilityMap {
  data: Float32Array;
  offset: number;
  stride: number;
  width: number;
  height: number;
}

/**
 * Text boxes from a detector's probability map: threshold it, take each connected region (8-neighbours, as OpenCV's
 * contours join pixels), fit the smallest rectangle around its outline, keep it if the map is confident inside,
 * grow it back out by the unclip distance and fit again, and scale it to the source picture. Sorted in reading order.
 */
export function boxesFromMap(map: ProbabilityMap, sourceWidth: number, sourceHeight: number, options: DbOptions = DB_DEFAULTS): DetectedBox[] {
  const { width, height } = map;
  const regions = connectedOutlines(map, options.threshold).slice(0, options.maxCandidates);
  const boxes: DetectedBox[] = [];
  for (const outline of regions) {
    const fitted = minAreaRect(outline);
    if (Math.min(fitted.width, fitted.height) < MIN_SIDE) continue;
    const score = meanInside(map, fitted.quad);
    if (score < options.boxThreshold) continue;
    const grown = offsetConvex(fitted.quad, (polygonArea(fitted.quad) * options.unclipRatio) / polygonPerimeter(fitted.quad));
    const refitted = minAreaRect(grown);
    if (Math.min(refitted.width, refitted.height) < MIN_SIDE + 2) continue;
    const scale = (point: Point): Point => [
      clamp(Math.round((point[0] / width) * sourceWidth), 0, sourceWidth),
      clamp(Math.round((point[1] / height) * sourceHeight), 0, sourceHeight),
    ];
    boxes.push({ box: refitted.quad.map(scale) as unknown as Quad, score });
  }
  return readingOrder(boxes);
}

const clamp = (value: number, low: number, high: number): number => Math.min(high, Math.max(low, value));

/**
 * The outline pixels (pixels with a 4-neighbour outside) of each 8-connected region of the thresholded map, as
 * points at pixel coordinates, regions in the order their first pixel is met scanning rows.
 */
export function connectedOutlines(map: ProbabilityMap, threshold: number): Point[][] {
  const { data, offset, stride, width, height } = map;
  const on = new Uint8Array(width * height);
  for (let y = 0; y < height; y++) {
    const row = offset + y * stride;
    for (let x = 0; x < width; x++) on[y * width + x] = data[row + x]! > threshold ? 1 : 0;
  }
  const seen = new Uint8Array(width * height);
  const stack = new Int32Array(width * height);
  const outlines: Point[][] = [];
  const isOn = (x: number, y: number): boolean => x >= 0 && y >= 0 && x < width && y < height && on[y * width + x] === 1;
  for (let start = 0; start < on.length; start++) {
    if (!on[start] || seen[start]) continue;
    const outline: Point[] = [];
    let top = 0;
    stack[top++] = start;
    seen[start] = 1;
    while (top > 0) {
      const index = stack[--top]!;
      const x = index % width;
      const y = (index - x) / width;
      if (!isOn(x - 1, y) || !isOn(x + 1, y) || !isOn(x, y - 1) || !isOn(x, y + 1)) outline.push([x, y]);
      for (let dy = -1; dy <= 1; dy++) {
        for (let dx = -1; dx <= 1; dx++) {
          const nx = x + dx, ny = y + dy;
          if ((dx || dy) && isOn(nx, ny) && !seen[ny * width + nx]) {
            seen[ny * width + nx] = 1;
            stack[top++] = ny * width + nx;
          }
        }
      }
    }
    outlines.push(outline);
  }
  return outlines;
}

/** The mean of the map over the pixels whose centre lies inside the (convex) quad; 0 for a quad holding none. */
function meanInside(map: ProbabilityMap, quad: Quad): number {
  const xs = quad.map((point) => point[0]);
  const ys = quad.map((point) => point[1]);
  const x0 = clamp(Math.floor(Math.min(...xs)), 0, map.width - 1), x1 = clamp(Math.ceil(Math.max(...xs)), 0, map.width - 1);
  const y0 = clamp(Math.floor(Math.min(...ys)), 0, map.height - 1), y1 = clamp(Math.ceil(Math.max(...ys)), 0, map.height - 1);
  let sum = 0;
  let count = 0;
  for (let y = y0; y <= y1; y++) {
    for (let x = x0; x <= x1; x++) {
      if (!insideConvex(quad, x, y)) continue;
      sum += map.data[map.offset + y * map.stride + x]!;
      count++;
    }
  }
  return count ? sum / count : 0;
}

/** Inside or on the edge of a convex polygon, whichever way round it runs. */
function insideConvex(polygon: readonly Point[], x: number, y: number): boolean {
  let sign = 0;
  for (let i = 0; i < polygon.length; i++) {
    const a = polygon[i]!;
    const b = polygon[(i + 1) % polygon.length]!;
    const side = (b[0] - a[0]) * (y - a[1]) - (b[1] - a[1]) * (x - a[0]);
    if (Math.abs(side) < 1e-9) continue;
    if (sign === 0) sign = Math.sign(side);
    else if (Math.sign(side) !== sign) return false;
  }
  return true;
}

/**
 * Top to bottom, and left to right within a line: boxes whose top-left corners are within 10 pixels vertically
 * count as one line (PaddleOCR's ordering, so lines read as a person would).
 */
export function readingOrder<T extends { box: Quad }>(boxes: readonly T[]): T[] {
  const sorted = [...boxes].sort((a, b) => a.box[0][1] - b.box[0][1] || a.box[0][0] - b.box[0][0]);
  for (let i = 0; i < sorted.length - 1; i++) {
    for (let j = i; j >= 0; j--) {
      const here = sorted[j]!, next = sorted[j + 1]!;
      if (Math.abs(next.box[0][1] - here.box[0][1]) < 10 && next.box[0][0] < here.box[0][0]) {
        sorted[j] = next;
        sorted[j + 1] = here;
      } else break;
    }
  }
  return sorted;
}
