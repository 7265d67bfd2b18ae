import type { InferenceSession } from 'onnxruntime-node';
import { OnnxSettings } from '../../../../protocol/engines/onnx.js';
import type { ModelManifest } from '../../../../protocol/index.js';
import { EngineError, type EngineJob, type JobOutput } from '../../../core/engine.js';
import { drawBoxes } from './annotate.js';
import { alphabetOf } from './ctc.js';
import type { Rgb } from './image.js';
import { readText, type OcrModels, type OcrOptions } from './reader.js';

/** What an OCR model's load gave the worker: its networks as sessions, its dictionary as bytes. */
export type OcrParts = Readonly<Record<string, InferenceSession | Uint8Array>>;

/** The side of the blank picture a probe reads (it names none): small, and a multiple of 32. */
const PROBE_SIDE = 32;

const built = new WeakMap<OcrParts, { models: OcrModels; options: OcrOptions }>();

/**
 * The detector, recogniser and alphabet of a loaded OCR model and its reading options (from its settings), built
 * once per load: the dictionary is parsed on the first batch, not on every one.
 */
export function ocrModelsOf(parts: OcrParts, manifest: ModelManifest): { models: OcrModels; options: OcrOptions } {
  const known = built.get(parts);
  if (known) return known;
  const { detector, recognizer, dictionary } = parts;
  if (!isSession(detector) || !isSession(recognizer) || !(dictionary instanceof Uint8Array)) {
    throw new EngineError('ENGINE_FAILED', `model ${manifest.name}: an ocr model holds a detector and a recognizer (ONNX) and a dictionary (text)`, false);
  }
  const settings = OnnxSettings.parse(manifest.settings ?? {}).ocr;
  const made = {
    models: { detector, recognizer, alphabet: alphabetOf(new TextDecoder().decode(dictionary)) },
    options: {
      limitSide: settings.limitSide, minConfidence: settings.minConfidence, linesPerRun: settings.linesPerRun,
      db: { threshold: settings.threshold, boxThreshold: settings.boxThreshold, unclipRatio: settings.unclipRatio, maxCandidates: 1000 },
    },
  };
  built.set(parts, made);
  return made;
}

const isSession = (part: unknown): part is InferenceSession => typeof part === 'object' && part !== null && !(part instanceof Uint8Array) && 'run' in part;

/**
 * A batch of `ocr` jobs: every picture through the detector in one run and every line found through the recogniser
 * in one run (reader.ts), then per job its lines as the JSON result and its picture with the boxes drawn as a PNG.
 * A job without a picture is a health probe: it reads a small blank picture.
 */
export async function ocrJobs(
  models: OcrModels, options: OcrOptions, jobs: readonly EngineJob[],
  use: { isCancelled(jobId: string): boolean; encodePng(rgb: Uint8Array, width: number, height: number): Promise<Uint8Array> },
): Promise<JobOutput[]> {
  const pictures = jobs.map((job): Rgb => {
    const picture = job.pictures?.image;
    if (!picture) return { data: new Uint8Array(PROBE_SIDE * PROBE_SIDE * 3).fill(255), width: PROBE_SIDE, height: PROBE_SIDE };
    if (picture.channels !== 3) throw new EngineError('INVALID_INPUT', `the picture of job ${job.id} has ${picture.channels} channels; OCR reads RGB`, false);
    return picture;
  });
  const read = await readText(models, pictures, options);
  return Promise.all(jobs.map(async (job, index): Promise<JobOutput> => {
    if (use.isCancelled(job.id)) return { jobId: job.id, ok: false, code: 'CANCELLED', message: 'cancelled', retryable: false };
    const lines = read[index]!.map((line) => ({ text: line.text, confidence: round(line.confidence, 4), box: line.box.map(([x, y]) => [x, y]) }));
    const picture = pictures[index]!;
    const annotated = drawBoxes(picture, read[index]!.map((line) => line.box));
    const png = await use.encodePng(annotated.data, annotated.width, annotated.height);
    return { jobId: job.id, ok: true, files: [{ bytes: png, mediaType: 'image/png', width: picture.width, height: picture.height }], result: { lines } };
  }));
}

const round = (value: number, digits: number): number => Math.round(value * 10 ** digits) / 10 ** digits;
