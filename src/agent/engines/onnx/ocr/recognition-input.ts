import { resizeRgb, writeChw, type Rgb } from './image.js';

/** The recogniser's input height, and the narrowest width a batch is padded to (PP-OCRv4's 3 × 48 × 320). */
export const REC_HEIGHT = 48;
export const REC_MIN_WIDTH = 320;

export interface RecognitionBatch {
  /** [N, 3, REC_HEIGHT, width]: each line resized to the height, keeping its shape, left-aligned, zeros after. */
  tensor: Float32Array;
  width: number;
}

/** (v / 255 − 0.5) / 0.5: the recogniser's inputs lie in [−1, 1], padding (0) is mid-grey. */
const HALF = [0.5, 0.5, 0.5] as const;

/**
 * One recogniser input for text lines of any lengths: each line resized to REC_HEIGHT high keeping its aspect ratio,
 * the batch as wide as its widest line (at least REC_MIN_WIDTH), so one session.run reads them all. `maxWidth` bounds
 * a very long line (it is squeezed rather than making the whole batch wider).
 */
export function recognitionBatch(lines: readonly Rgb[], maxWidth = 2048): RecognitionBatch {
  const widths = lines.map((line) => Math.min(maxWidth, Math.max(1, Math.ceil((REC_HEIGHT * line.width) / line.height))));
  const width = Math.max(REC_MIN_WIDTH, ...widths);
  const tensor = new Float32Array(lines.length * 3 * REC_HEIGHT * width);
  lines.forEach((line, index) => writeChw(tensor, index, REC_HEIGHT, width, resizeRgb(line, widths[index]!, REC_HEIGHT), HALF, HALF));
  return { tensor, width };
}
