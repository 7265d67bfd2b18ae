import { describe, expect, it } from 'vitest';
import { cropQuad, homography, rotateCounterClockwise } from '../../../../../src/agent/engines/onnx/ocr/crop.js';
import { alphabetOf, ctcDecode } from '../../../../../src/agent/engines/onnx/ocr/ctc.js';
import { detectionBatch, detectionSize } from '../../../../../src/agent/engines/onnx/ocr/detection-input.js';
import { resizeRgb, type Rgb } from '../../../../../src/agent/engines/onnx/ocr/image.js';
import { recognitionBatch, REC_HEIGHT, REC_MIN_WIDTH } from '../../../../../src/agent/engines/onnx/ocr/recognition-input.js';
import { drawBoxes } from '../../../../../src/agent/engines/onnx/ocr/annotate.js';

/** A picture whose pixel (x, y) is (x, y, 7). */
function ramp(width: number, height: number): Rgb {
  const data = new Uint8Array(width * height * 3);
  for (let y = 0; y < height; y++) for (let x = 0; x < width; x++) data.set([x, y, 7], (y * width + x) * 3);
  return { data, width, height };
}
const pixel = (picture: Rgb, x: number, y: number): number[] => [...picture.data.subarray((y * picture.width + x) * 3, (y * picture.width + x) * 3 + 3)];

describe('OCR preprocessing', () => {
  it('resizes bilinearly with pixel centres at +0.5 (a ramp halves exactly)', () => {
    const half = resizeRgb(ramp(8, 4), 4, 2);
    expect(pixel(half, 0, 0)).toEqual([1, 1, 7]); // (0.5, 0.5) rounds up
    expect(pixel(half, 3, 1)).toEqual([7, 3, 7]);
  });

  it('detection sizes: longer side limited, multiples of 32, at least 32', () => {
    expect(detectionSize(100, 50, 960)).toEqual({ width: 96, height: 64 });
    expect(detectionSize(1920, 1080, 960)).toEqual({ width: 960, height: 544 });
    expect(detectionSize(10, 10, 960)).toEqual({ width: 32, height: 32 });
  });

  it('a detection batch pads each picture to the largest, in BGR planes normalised by ImageNet\'s figures', () => {
    const white: Rgb = { data: new Uint8Array(64 * 32 * 3).fill(255), width: 64, height: 32 };
    const red: Rgb = { data: new Uint8Array(32 * 32 * 3).map((_, i) => (i % 3 === 0 ? 255 : 0)), width: 32, height: 32 };
    const batch = detectionBatch([white, red], 960);
    expect([batch.width, batch.height]).toEqual([64, 32]);
    const plane = 64 * 32;
    expect(batch.tensor[0]).toBeCloseTo((1 - 0.485) / 0.229, 5); // B plane of white, with the first mean
    const redBase = 3 * plane;
    expect(batch.tensor[redBase]).toBeCloseTo((0 - 0.485) / 0.229, 5); // B of red is 0
    expect(batch.tensor[redBase + 2 * plane]).toBeCloseTo((1 - 0.406) / 0.225, 5); // R plane
    expect(batch.tensor[redBase + 40]).toBe(0); // beyond the red picture: padding
  });

  it('a recognition batch keeps each line\'s shape at 48 high, as wide as the widest (at least 320)', () => {
    const short: Rgb = { data: new Uint8Array(20 * 24 * 3).fill(255), width: 20, height: 24 };
    const long: Rgb = { data: new Uint8Array(400 * 24 * 3).fill(0), width: 400, height: 24 };
    expect(recognitionBatch([short]).width).toBe(REC_MIN_WIDTH);
    const batch = recognitionBatch([short, long]);
    expect(batch.width).toBe(800);
    expect(batch.tensor.length).toBe(2 * 3 * REC_HEIGHT * 800);
    expect(batch.tensor[39]).toBeCloseTo(1); // white, within the short line's 40 pixels
    expect(batch.tensor[40]).toBe(0); // padding after it
  });

  it('crops an upright box exactly, and maps corners through the homography', () => {
    const picture = ramp(64, 32);
    const crop = cropQuad(picture, [[10, 5], [30, 5], [30, 15], [10, 15]]);
    expect([crop.width, crop.height]).toEqual([20, 10]);
    expect(pixel(crop, 0, 0)).toEqual([10, 5, 7]);
    expect(pixel(crop, 19, 9)).toEqual([29, 14, 7]);
    const h = homography(20, 10, [[10, 5], [30, 5], [32, 15], [8, 15]]);
    const map = (x: number, y: number) => [(h[0]! * x + h[1]! * y + h[2]!) / (h[6]! * x + h[7]! * y + 1), (h[3]! * x + h[4]! * y + h[5]!) / (h[6]! * x + h[7]! * y + 1)];
    expect(map(20, 10)[0]).toBeCloseTo(32);
    expect(map(0, 10)[0]).toBeCloseTo(8);
  });

  it('turns a tall crop a quarter counter-clockwise', () => {
    const tall = cropQuad(ramp(64, 64), [[10, 0], [20, 0], [20, 40], [10, 40]]);
    expect([tall.width, tall.height]).toEqual([40, 10]);
    const turned = rotateCounterClockwise({ data: new Uint8Array([1, 1, 1, 2, 2, 2]), width: 2, height: 1 });
    expect([turned.width, turned.height, turned.data[0]]).toEqual([1, 2, 2]);
  });

  it('CTC: repeats merge, blanks split, the confidence is the mean of the kept characters', () => {
    const alphabet = alphabetOf('a\nb\n');
    expect(alphabet).toEqual(['', 'a', 'b', ' ']);
    // Steps: a a blank a b space — "aab " ; scores of the winners 0.9 0.8 0.7 0.6 0.5 0.4
    const best = [[1, 0.9], [1, 0.8], [0, 0.7], [1, 0.6], [2, 0.5], [3, 0.4]] as const;
    const scores = new Float32Array(best.length * 4);
    best.forEach(([c, p], t) => {
      for (let k = 0; k < 4; k++) scores[t * 4 + k] = k === c ? p : (1 - p) / 4;
    });
    const decoded = ctcDecode(scores, 0, best.length, 4, alphabet);
    expect(decoded.text).toBe('aab ');
    expect(decoded.confidence).toBeCloseTo((0.9 + 0.6 + 0.5 + 0.4) / 4, 5);
  });

  it('draws each box\'s outline and leaves the rest', () => {
    const drawn = drawBoxes({ data: new Uint8Array(20 * 20 * 3), width: 20, height: 20 }, [[[2, 2], [17, 2], [17, 17], [2, 17]]], [255, 0, 0], 1);
    expect(pixel(drawn, 10, 2)).toEqual([255, 0, 0]);
    expect(pixel(drawn, 17, 10)).toEqual([255, 0, 0]);
    expect(pixel(drawn, 10, 10)).toEqual([0, 0, 0]);
  });
});
