import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ocrJobs, ocrModelsOf } from '../../../../../src/agent/engines/onnx/ocr/jobs.js';
import { encodePng } from '../../../../../src/agent/engines/onnx/png.js';
import type { ModelManifest } from '../../../../../src/protocol/index.js';
import { OCR_ASSETS, OCR_FILES, plainText, renderPage } from '../../../../helpers/ocr-pages.js';

/** The ocr pipeline's jobs on the real PaddleOCR files, in this process: settings, probes, a job's outputs. */
let parts: Record<string, ort.InferenceSession | Uint8Array>;
beforeAll(async () => {
  parts = {
    detector: await ort.InferenceSession.create(join(OCR_ASSETS, OCR_FILES.detector)),
    recognizer: await ort.InferenceSession.create(join(OCR_ASSETS, OCR_FILES.recognizer)),
    dictionary: new Uint8Array(readFileSync(join(OCR_ASSETS, OCR_FILES.dictionary))),
  };
});
afterAll(async () => {
  for (const part of Object.values(parts ?? {})) if (!(part instanceof Uint8Array)) await part.release();
});

const manifest = (settings: Record<string, unknown>): ModelManifest => ({
  name: 'ocr@1', version: '1', engine: 'onnx', digest: 'sha256:x', bytes: 0, memoryMB: 64, jobTypes: ['ocr'], params: {}, settings,
});
const use = { isCancelled: (id: string) => id === 'cancelled', encodePng };

describe('ocr jobs', () => {
  it('reads settings once per load, with PaddleOCR\'s defaults for what they leave out', () => {
    const built = ocrModelsOf(parts, manifest({ pipeline: 'ocr', ocr: { minConfidence: 0.7 } }));
    expect(built.options).toMatchObject({ limitSide: 960, minConfidence: 0.7, linesPerRun: 6, db: { threshold: 0.3, boxThreshold: 0.6, unclipRatio: 1.5 } });
    expect(built.models.alphabet).toHaveLength(6625);
    expect(ocrModelsOf(parts, manifest({ pipeline: 'ocr' }))).toBe(built); // the same parts: built once
    expect(() => ocrModelsOf({ detector: parts.detector! }, manifest({ pipeline: 'ocr' }))).toThrow(/holds a detector and a recognizer/);
  });

  it('answers each job with its lines and an annotated PNG; a probe (no picture) reads a blank page; a cancelled job is cancelled', async () => {
    const png = await renderPage({ lines: ['Probe and page', 'read together'], fonts: ['DejaVu Sans'] }, 3);
    const { data, info } = await sharp(png).removeAlpha().raw().toBuffer({ resolveWithObject: true });
    const picture = { data: new Uint8Array(data), width: info.width, height: info.height, channels: 3 as const };
    const { models, options } = ocrModelsOf(parts, manifest({ pipeline: 'ocr' }));
    const [page, probe, cancelled] = await ocrJobs(models, options, [
      { id: 'page', input: { image: 'sha256:a' }, pictures: { image: picture } },
      { id: 'probe', input: {} },
      { id: 'cancelled', input: { image: 'sha256:a' }, pictures: { image: picture } },
    ], use);
    expect(page).toMatchObject({ ok: true, files: [{ mediaType: 'image/png', width: 480, height: 160 }] });
    const lines = (page as { result: { lines: { text: string }[] } }).result.lines;
    expect(lines.map((line) => plainText(line.text))).toEqual(['probeandpage', 'readtogether']);
    expect(probe).toMatchObject({ ok: true, result: { lines: [] } });
    expect(cancelled).toMatchObject({ ok: false, code: 'CANCELLED' });
  });
});
