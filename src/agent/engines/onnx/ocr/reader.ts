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
  /** Lines per recogniser run (recognize says why not all of them in one). */
  linesPerRun: number;
}

const OCR_DEFAULTS: OcrOptions = { limitSide: 960, db: DB_DEFAULTS, minConfidence: 0.5, linesPerRun: 6 };

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

/**
 * The text of each line picture. Lines are sorted by width and read `perRun` at a time, each run padded to its
 * widest line — lines of different pictures (different jobs) share runs. Not all in one run: the recogniser's cost
 * grows faster than its width (its mixing blocks attend across the whole line), so padding a short line to the
 * longest of a large batch costs more than the batch saves, and on a CPU a run of 4–8 lines is the cheapest per line
 * (bench/RESULTS.md, *OCR*); PaddleOCR reads 6 at a time, sorted the same way.
 */
async function recognize(recognizer: InferenceSession, lines: readonly Rgb[], alphabet: readonly string[], perRun = 6): Promise<{ text: string; confidence: number }[]> {
  const order = lines.map((line, index) => ({ index, ratio: line.width / line.height })).sort((a, b) => a.ratio - b.ratio);
  const decoded: { text: string; confidence: number }[] = new Array(lines.length);
  for (let from = 0; from < order.length; from += perRun) {
    const chunk = order.slice(from, from + perRun);
    const batch = recognitionBatch(chunk.map(({ index }) => lines[index]!));
    const input = new ort.Tensor('float32', batch.tensor, [chunk.length, 3, REC_HEIGHT, batch.width]);
    const outputs = await recognizer.run({ [recognizer.inputNames[0]!]: input });
    const scores = outputs[recognizer.outputNames[0]!]!;
    const [, steps, classes] = scores.dims as [number, number, number];
    const data = scores.data as Float32Array;
    chunk.forEach(({ index }, k) => (decoded[index] = ctcDecode(data, k * steps * classes, steps, classes, alphabet)));
  }
  return decoded;
}

/**
 * Read every picture of a batch: one detector run for all the pictures, every box cut out upright, the boxes of all
 * the pictures through the recogniser together (in runs of `linesPerRun`), lines below the confidence floor dropped. Each picture's lines in
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
  const read = await recognize(models.recognizer, crops, models.alphabet, options.linesPerRun);
  const lines: OcrLine[][] = pictures.map(() => []);
  read.forEach((result, index) => {
    if (result.confidence < options.minConfidence || result.text.trim() === '') return;
    const { picture, box } = owners[index]!;
    lines[picture]!.push({ text: result.text, confidence: result.confidence, box });
  });
  return lines;
}
