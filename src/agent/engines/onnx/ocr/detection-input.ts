import { resizeRgb, writeChw, type Rgb } from './image.js';

/** How a picture was fitted for detection: the size it was resized to (multiples of 32), inside the batch's tensor. */
export interface DetectionFit {
  width: number;
  height: number;
  /** The picture's own size, which boxes are scaled back to. */
  sourceWidth: number;
  sourceHeight: number;
}

export interface DetectionBatch {
  /** [N, 3, height, width]: each picture top-left, the rest zeros (the normalised mean colour). */
  tensor: Float32Array;
  width: number;
  height: number;
  fits: DetectionFit[];
}

/**
 * ImageNet's mean and deviation, in the order they are usually written (R, G, B) yet applied to the B, G, R planes:
 * PaddleOCR normalises the BGR picture OpenCV reads with them as written, and its detector learned that.
 */
const MEAN = [0.485, 0.456, 0.406] as const;
const STD = [0.229, 0.224, 0.225] as const;

/**
 * The size the detector sees a picture at: its longer side at most `limitSide` (shrunk, never enlarged), each side
 * rounded to a multiple of 32 (the network halves the picture five times), at least 32.
 */
export function detectionSize(width: number, height: number, limitSide: number): { width: number; height: number } {
  const ratio = Math.max(width, height) > limitSide ? limitSide / Math.max(width, height) : 1;
  const side = (value: number): number => Math.max(32, Math.round((value * ratio) / 32) * 32);
  return { width: side(width), height: side(height) };
}

/**
 * One detector input for a batch of pictures: each resized (detectionSize) and normalised, padded to the largest
 * width and height of the batch, so one session.run detects text in all of them.
 */
export function detectionBatch(pictures: readonly Rgb[], limitSide: number): DetectionBatch {
  const fits = pictures.map((picture) => ({ ...detectionSize(picture.width, picture.height, limitSide), sourceWidth: picture.width, sourceHeight: picture.height }));
  const width = Math.max(...fits.map((fit) => fit.width));
  const height = Math.max(...fits.map((fit) => fit.height));
  const tensor = new Float32Array(pictures.length * 3 * width * height);
  pictures.forEach((picture, index) => {
    const fit = fits[index]!;
    const resized = fit.width === picture.width && fit.height === picture.height ? picture : resizeRgb(picture, fit.width, fit.height);
    writeChw(tensor, index, height, width, resized, MEAN, STD);
  });
  return { tensor, width, height, fits };
}
