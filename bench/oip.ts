/**
 * Open Inference Protocol v2 infer on the built-in `simple` (Triton's example: INT32 [1,16] × 2 → sum, difference), the
 * model Triton's `perf_analyzer` quick start measures (1,408 infer/s at concurrency 1, 708 µs average, over HTTP on a
 * GPU host). Side by side in one run, `gpumesh up` as it starts by default, every request a durable job: OIP in JSON,
 * OIP with the binary tensor data extension, and the same job through `/v1/jobs` with `Prefer: wait`; each at
 * concurrency 1 and 16. And the same OIP JSON request to `simple-worker`, the same file added with `gpumesh models add`
 * with its session in a worker process (OnnxSettings.process `worker`, any model's default) where the built-in
 * `simple` has it in the agent's own process (`agent`): what the process hop costs. Each concurrency's requests are
 * split into `--rounds` rounds, every round taking the paths in a rotated order, so a neighbour's burst on a shared VM
 * lands on one round of each path rather than on one path; the rate is of all rounds together, with each round's beside
 * it. Prints a table, writes bench/out/oip.json.
 *
 *   npm run bench:oip -- [--requests 3000] [--warmup 2000] [--rounds 3]
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { buildSimple } from '../src/builtin-models/index.js';
import { removeDir, startMesh } from '../test/helpers/mesh.js';
import { gpumeshRun } from '../test/helpers/processes.js';
import { machine, percentile, printTable, summarize, writeResults } from './lib.js';
import { BenchClient } from './mesh-client.js';
import { oipRequest, SIMPLE_A, SIMPLE_B } from './oip-requests.js';

const { values } = parseArgs({ options: { requests: { type: 'string', default: '3000' }, warmup: { type: 'string', default: '2000' }, rounds: { type: 'string', default: '3' } } });
const REQUESTS = Number(values.requests);
const ROUNDS = Number(values.rounds);
const WARMUP = Number(values.warmup);
const TARGET = { inferPerSecond: 1408, averageUs: 708 };

const jobBody = JSON.stringify({ type: 'tensor', model: 'simple', input: { inputs: { INPUT0: { shape: [1, 16], data: SIMPLE_A }, INPUT1: { shape: [1, 16], data: SIMPLE_B } } } });

type Mode = 'oip json' | 'oip binary' | '/v1/jobs Prefer: wait' | 'oip json, worker process';
const MODES: Mode[] = ['oip json', 'oip binary', '/v1/jobs Prefer: wait', 'oip json, worker process'];

async function once(client: BenchClient, mode: Mode): Promise<number> {
  const started = performance.now();
  if (mode === 'oip json') await oipRequest(client, 'json');
  else if (mode === 'oip json, worker process') await oipRequest(client, 'json', 'simple-worker');
  else if (mode === 'oip binary') await oipRequest(client, 'binary');
  else {
    const reply = await client.request('POST', '/v1/jobs', jobBody, { prefer: 'wait=30' });
    if (reply.status !== 200) throw new Error(`${mode}: ${reply.status} ${reply.text.slice(0, 200)}`);
  }
  return performance.now() - started;
}

async function measure(client: BenchClient, mode: Mode, concurrency: number, count: number): Promise<{ latencies: number[]; seconds: number }> {
  const latencies: number[] = [];
  let next = 0;
  const started = performance.now();
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next++ < count) latencies.push(await once(client, mode));
  }));
  return { latencies, seconds: (performance.now() - started) / 1000 };
}

const mesh = await startMesh({ env: { GPUMESH_LOG_LEVEL: 'warn' } });
try {
  const file = join(mesh.data, 'simple.onnx');
  writeFileSync(file, buildSimple());
  const settings = JSON.stringify({ pipeline: 'tensors', threads: 1, process: 'worker' });
  const added = await gpumeshRun(['models', 'add', file, '--name', 'simple-worker', '--settings', settings], { GPUMESH_HOME: mesh.data, GPUMESH_URL: mesh.url });
  if (added.code !== 0) throw new Error(`models add simple-worker: ${added.output}`);
  const client = new BenchClient(mesh.url, mesh.admin, 32);
  for (const mode of MODES) await measure(client, mode, 4, WARMUP);
  const rows: (string | number)[][] = [];
  const results: Record<string, unknown>[] = [];
  for (const concurrency of [1, 16]) {
    const taken = new Map(MODES.map((mode) => [mode, { latencies: [] as number[], seconds: 0, rounds: [] as number[] }]));
    for (let round = 0; round < ROUNDS; round++) {
      const count = Math.round(REQUESTS / ROUNDS);
      // Rotated each round: every path goes first, and last, as often as the others.
      for (const mode of [...MODES.slice(round % MODES.length), ...MODES.slice(0, round % MODES.length)]) {
        const { latencies, seconds } = await measure(client, mode, concurrency, count);
        const entry = taken.get(mode)!;
        entry.latencies.push(...latencies);
        entry.seconds += seconds;
        entry.rounds.push(count / seconds);
      }
    }
    for (const mode of MODES) {
      const { latencies, seconds, rounds } = taken.get(mode)!;
      const summary = summarize(latencies);
      const rate = latencies.length / seconds;
      const average = latencies.reduce((sum, value) => sum + value, 0) / latencies.length;
      const medianRound = percentile(rounds, 50);
      rows.push([mode, concurrency, Math.round(rate), Math.round(medianRound), rounds.map((value) => Math.round(value)).join(' / '), (average * 1000).toFixed(0), summary.p50.toFixed(3), summary.p99.toFixed(3)]);
      results.push({ mode, concurrency, requests: latencies.length, inferPerSecond: rate, medianRound, rounds, averageMs: average, ...summary });
    }
  }
  client.close();
  printTable(`simple, every request a durable job (${REQUESTS} requests each in ${ROUNDS} rounds, after ${WARMUP} warm-up per mode)`, ['path', 'concurrency', 'infer/s', 'median round', 'each round', 'avg µs', 'p50 ms', 'p99 ms'], rows);
  const oipOne = results.filter((result) => result.concurrency === 1 && (result.mode === 'oip json' || result.mode === 'oip binary'));
  // A round is the unit a neighbour's burst spoils: the path's median round is its figure, the whole run's rate beside it.
  const best = Math.max(...oipOne.map((result) => result.medianRound as number));
  const overall = Math.max(...oipOne.map((result) => result.inferPerSecond as number));
  process.stdout.write(`\ntarget: OIP at concurrency 1 ≥ ${TARGET.inferPerSecond} infer/s (Triton's perf_analyzer quick start, ${TARGET.averageUs} µs average): best median round ${Math.round(best)} infer/s (all rounds together ${Math.round(overall)}) — ${best >= TARGET.inferPerSecond ? 'met' : 'NOT met'}\n`);
  const rate = (mode: Mode, concurrency: number): number => results.find((result) => result.mode === mode && result.concurrency === concurrency)!.inferPerSecond as number;
  for (const concurrency of [1, 16]) process.stdout.write(`in the agent's process ÷ a worker process, OIP JSON at concurrency ${concurrency}: ${(rate('oip json', concurrency) / rate('oip json, worker process', concurrency)).toFixed(2)}×\n`);
  process.stdout.write(`wrote ${writeResults('oip', { machine: machine(), target: TARGET, rounds: ROUNDS, results })}\n`);
} finally {
  await mesh.stop();
  removeDir(mesh.data);
}
