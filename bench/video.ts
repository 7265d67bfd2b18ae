/**
 * Video: frames per second for one clip (64 frames of 256×256 by default, 6 steps a frame), and where the time
 * goes — generation (the ONNX worker rendering frames) against encoding (ffmpeg, governed, turning raw RGB into
 * an H.264 MP4 and a poster). Four paths, side by side in one run, each repeated:
 *
 *   generate only     the engine's worker renders the clip into a sink that discards frames (no ffmpeg)
 *   encode only       ffmpeg alone, fed the clip's 64 frames from memory as fast as it takes them
 *   engine: both      the engine with the real encoder: frames piped to ffmpeg while the next are rendered
 *   mesh: both        a video job through `gpumesh up` (HTTP, queue, link, agent, upload, publish), from submit to
 *                     its succeeded event
 *
 *   npm run bench:video -- [--runs 3] [--frames 64] [--size 256] [--steps 6]
 */
import { loadavg } from 'node:os';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import { cpuDevice } from '../src/agent/devices.js';
import { OnnxEngine } from '../src/agent/engines/onnx/engine.js';
import { Governor } from '../src/agent/governance/governor.js';
import { Supervisor } from '../src/agent/governance/supervisor.js';
import { VideoEncoder, type ClipEncoder, type ClipEncoding } from '../src/agent/video/encoder.js';
import { findFfmpeg, type ClipShape } from '../src/agent/video/ffmpeg.js';
import { builtinModel } from '../src/builtin-models/index.js';
import { removeDir, startMesh } from '../test/helpers/mesh.js';
import { percentile, printTable, writeResults } from './lib.js';
import { BenchClient } from './mesh-client.js';

const { values } = parseArgs({ options: { runs: { type: 'string', default: '3' }, frames: { type: 'string', default: '64' }, size: { type: 'string', default: '256' }, steps: { type: 'string', default: '6' } } });
const RUNS = Number(values.runs);
const FRAMES = Number(values.frames);
const SIZE = Number(values.size);
const STEPS = Number(values.steps);
const INPUT = { prompt: 'a lighthouse at dusk', seed: 11, frames: FRAMES, fps: 24, width: SIZE, height: SIZE, steps: STEPS };

const log = pino({ level: 'warn' });
const dir = mkdtempSync(join(tmpdir(), 'gpumesh-bench-video-'));
const governor = Governor.withoutCgroups(log);
const supervisor = new Supervisor(log, governor);
const ffmpeg = await findFfmpeg();
if ('missing' in ffmpeg) throw new Error(`bench:video needs ffmpeg: ${ffmpeg.missing}`);

/** A sink in place of ffmpeg: takes every frame at once (so generation is never held back) and keeps the last clip's frames. */
class DiscardingEncoder implements ClipEncoder {
  readonly unavailable = null;
  frames: Uint8Array[] = [];
  async open(_clipId: string, _shape: ClipShape): Promise<ClipEncoding> {
    this.frames = [];
    return {
      write: async (rgb) => void this.frames.push(rgb),
      finish: () => Promise.reject(new Error('a discarding encoder makes no files')),
      abort: async () => {},
    };
  }
}

async function loadVideoModel(encoder: ClipEncoder) {
  const model = builtinModel('gen-video')!;
  const path = join(dir, 'gen.onnx');
  writeFileSync(path, model.bytes);
  const engine = new OnnxEngine(supervisor, encoder);
  const loaded = await engine.load({
    name: model.name, version: model.version, engine: 'onnx', digest: model.digest, bytes: model.bytes.length, memoryMB: model.memoryMB,
    jobTypes: model.jobTypes, params: { defaultSteps: STEPS }, settings: { pipeline: 'cppn-video' },
  }, path, cpuDevice(4096));
  return { loaded, close: () => loaded.unload().then(() => engine.close()) };
}

const timed = async (work: () => Promise<unknown>): Promise<number> => {
  const start = performance.now();
  await work();
  return performance.now() - start;
};

// The three engine paths take turns, run by run, so the machine's noise (it is shared) falls on each alike.
// Generation alone: the discarding encoder makes the clip "fail" at finish; the worker's time is what is measured.
const sink = new DiscardingEncoder();
const encoder = new VideoEncoder({ governor, ffmpeg, scratchDir: join(dir, 'video'), log });
const discarding = await loadVideoModel(sink);
const encoding = await loadVideoModel(encoder);
const generateOnly: number[] = [];
const encodeOnly: number[] = [];
const engineBoth: number[] = [];
const engineTimings: Array<{ generateMs: number; encodeMs: number; finishMs: number }> = [];
let clipBytes = 0;
for (let i = 0; i < RUNS; i++) {
  generateOnly.push(await timed(() => discarding.loaded.run([{ id: `g${i}`, input: INPUT }], () => {})));
  const frames = sink.frames;
  if (frames.length !== FRAMES) throw new Error(`the sink got ${frames.length} frames, not ${FRAMES}`);
  // ffmpeg alone, on those frames.
  encodeOnly.push(await timed(async () => {
    const clip = await encoder.open(`e${i}`, { width: SIZE, height: SIZE, fps: INPUT.fps });
    for (const frame of frames) await clip.write(frame);
    const done = await clip.finish();
    clipBytes = done.video.size;
    await done.video.discard();
    await done.poster.discard();
  }));
  // The engine with the real encoder: generation and encoding overlap.
  engineBoth.push(await timed(async () => {
    const { outputs: [output] } = await encoding.loaded.run([{ id: `b${i}`, input: INPUT }], () => {});
    if (!output?.ok) throw new Error(`the clip failed: ${JSON.stringify(output)}`);
    engineTimings.push((output.result as { timings: { generateMs: number; encodeMs: number; finishMs: number } }).timings);
    for (const file of output.onDisk ?? []) await file.discard();
  }));
}
await discarding.close();
await encoding.close();
await supervisor.stopAll();

// Through a whole mesh.
const meshBoth: number[] = [];
const meshTimings: Array<{ generateMs: number; encodeMs: number; finishMs: number }> = [];
{
  const running = await startMesh({ env: { GPUMESH_LOG_LEVEL: 'warn' } });
  const client = new BenchClient(running.url, running.admin, 4);
  try {
    await client.listen();
    // One short clip first: the model's load is not what this measures.
    await client.run({ type: 'video', input: { ...INPUT, frames: 2, width: 16, height: 16, steps: 1 } });
    for (let i = 0; i < RUNS; i++) {
      const start = performance.now();
      const id = await client.submit({ type: 'video', input: INPUT });
      const end = await client.completion(id);
      if (end.type !== 'succeeded') throw new Error(`the clip ${id} ${end.type}`);
      meshBoth.push(end.at - start);
      const job = JSON.parse((await client.request('GET', `/v1/jobs/${id}`)).text) as { result: { timings: { generateMs: number; encodeMs: number; finishMs: number } } };
      meshTimings.push(job.result.timings);
    }
  } finally {
    client.close();
    await running.stop();
    removeDir(running.data);
  }
}
rmSync(dir, { recursive: true, force: true });

const median = (values: readonly number[]): number => percentile(values, 50);
const base = median(generateOnly);
const fps = (ms: number): number => FRAMES / (ms / 1000);
// On a shared machine the fastest run is the best estimate of the cost itself; the median says what to expect.
const best = (values: readonly number[]): number => Math.min(...values);
const row = (label: string, values: readonly number[]): (string | number)[] =>
  [label, median(values), fps(median(values)), median(values) / base, best(values), fps(best(values))];
const rows = [
  row('generate only (worker → sink)', generateOnly),
  row('encode only (ffmpeg, frames in memory)', encodeOnly),
  row('engine: generate + encode', engineBoth),
  row('mesh: submit → succeeded', meshBoth),
];
const load = loadavg().map((value) => value.toFixed(2)).join(' ');
printTable(`one ${FRAMES}-frame ${SIZE}×${SIZE} clip, ${STEPS} steps a frame: median of ${RUNS} runs (load average ${load})`, ['path', 'median ms', 'frames/s', '× generate only', 'fastest ms', 'frames/s'], rows);
const split = (timings: typeof engineTimings) => ({
  generateMs: median(timings.map((t) => t.generateMs)), encodeMs: median(timings.map((t) => t.encodeMs)), finishMs: median(timings.map((t) => t.finishMs)),
});
printTable('inside the pipelined runs (the job\'s own result.timings, median ms)', ['path', 'generate', 'ffmpeg ran', 'ffmpeg after last frame'], [
  ['engine', ...Object.values(split(engineTimings))],
  ['mesh', ...Object.values(split(meshTimings))],
]);
const path = writeResults('video', {
  input: INPUT, runs: RUNS, loadAverage: loadavg(), clipBytes,
  ms: { generateOnly, encodeOnly, engineBoth, meshBoth },
  fastest: { generateOnly: best(generateOnly), encodeOnly: best(encodeOnly), engineBoth: best(engineBoth), meshBoth: best(meshBoth) },
  median: { generateOnly: base, encodeOnly: median(encodeOnly), engineBoth: median(engineBoth), meshBoth: median(meshBoth) },
  framesPerSecond: { generateOnly: fps(base), encodeOnly: fps(median(encodeOnly)), engineBoth: fps(median(engineBoth)), meshBoth: fps(median(meshBoth)) },
  timings: { engine: split(engineTimings), mesh: split(meshTimings) },
});
process.stdout.write(`\nclip: ${clipBytes} bytes\nwrote ${path}\n`);
