import * as ort from 'onnxruntime-node';
import type { InferenceSession } from 'onnxruntime-node';
import { cropQuad } from './crop.js';
import { ctcDecode } from './ctc.js';
import { boxesFromMap, DB_DEFAULTS, type DbOptions, type DetectedBox } from './db-postprocess.js';
import { detectionBatch } from './detection-input.js';
import type { Quad } from './geometry.js';
import type { Rgb } from './image.js';
import { recognitionBatch, REC_HEIGHT } from './recognition-input.js';

/** What reads text: a DB detector, a CTC recogniser and the recogniser's alphabet (ctc.ts: alphabetOf). */
export interface OcrModels {
  detector: InferenceSession;
  recognizer: InferenceSession;
  alphabet: readonly string[];
}

export interface OcrOptions {
  /** The detector sees a picture with its longer side at most this (PaddleOCR: 960). */
  limitSide: number;
  db: DbOptions;
  /** Lines read with a lower confidence are left out (PaddleOCR's drop score, 0.5). */
  minConfidence: number;
}

export const OCR_DEFAULTS: OcrOptions = { limitSide: 960, db: DB_DEFAULTS, minConfidence: 0.5 };

export interface OcrLine {
  text: string;
  confidence: number;
  /** Corners in the picture's pixels: top-left, top-right, bottom-right, bottom-left. */
  box: Quad;
}

/** What the detector made of a batch: each picture's boxes, and the probability map (for checks against a direct run). */
export interface Detection {
  boxes: DetectedBox[][];
  map: { data: Float32Array; dims: readonly number[] };
}

/** Text boxes in every picture, from one session.run over the batch (pictures padded to a common size). */
export async function detect(detector: InferenceSession, pictures: readonly Rgb[], options: OcrOptions = OCR_DEFAULTS): Promise<Detection> {
  const batch = detectionBatch(pictures, options.limitSide);
  const input = new ort.Tensor('float32', batch.tensor, [pictures.length, 3, batch.height, batch.width]);
  const outputs = await detector.run({ [detector.inputNames[0]!]: input });
  const map = outputs[detector.outputNames[0]!]!;
  const data = map.data as Float32Array;
  // The map is [N, 1, H', W']; PP-OCR's is the input's size, but read its own dims rather than assume it.
  const [, , mapHeight, mapWidth] = map.dims as [number, number, number, number];
  const boxes = batch.fits.map((fit, index) => {
    const width = Math.round((fit.width * mapWidth) / batch.width);
    const height = Math.round((fit.height * mapHeight) / batch.height);
    return boxesFromMap({ data, offset: index * mapHeight * mapWidth, stride: mapWidth, width, height }, fit.sourceWidth, fit.sourceHeight, options.db);
  });
  return { boxes, map: { data, dims: map.dims } };
}

/** The text of each line picture, from one session.run over all of them (padded to the widest). */
export async function recognize(recognizer: InferenceSession, lines: readonly Rgb[], alphabet: readonly string[]): Promise<{ text: string; confidence: number }[]> {
  if (lines.length === 0) return [];
  const batch = recognitionBatch(lines);
  const input = new ort.Tensor('float32', batch.tensor, [lines.length, 3, REC_HEIGHT, batch.width]);
  const outputs = await recognizer.run({ [recognizer.inputNames[0]!]: input });
  const scores = outputs[recognizer.outputNames[0]!]!;
  const [, steps, classes] = scores.dims as [number, number, number];
  const data = scores.data as Float32Array;
  return lines.map((_, index) => ctcDecode(data, index * steps * classes, steps, classes, alphabet));
}

/**
 * Read every picture of a batch: one detector run for all the pictures, every box cut out upright, one recogniser
 * run for all the boxes of all the pictures, lines below the confidence floor dropped. Each picture's lines in
 * reading order.
 */
export async function readText(models: OcrModels, pictures: readonly Rgb[], options: OcrOptions = OCR_DEFAULTS): Promise<OcrLine[][]> {
  const { boxes } = await detect(models.detector, pictures, options);
  const crops: Rgb[] = [];
  const owners: { picture: number; box: Quad }[] = [];
  boxes.forEach((found, picture) => {
    for (const { box } of found) {
      crops.push(cropQuad(pictures[picture]!, box));
      owners.push({ picture, box });
    }
  });
  const read = await recognize(models.recognizer, crops, models.alphabet);
  const lines: OcrLine[][] = pictures.map(() => []);
  read.forEach((result, index) => {
    if (result.confidence < options.minConfidence || result.text.trim() === '') return;
    const { picture, box } = owners[index]!;
    lines[picture]!.push({ text: result.text, confidence: result.confidence, box });
  });
  return lines;
}
