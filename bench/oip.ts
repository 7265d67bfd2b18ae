/**
 * Open Inference Protocol v2 infer on the built-in `simple` (Triton's example: INT32 [1,16] × 2 → sum, difference), the
 * model Triton's `perf_analyzer` quick start measures (1,408 infer/s at concurrency 1, 708 µs average, over HTTP on a
 * GPU host). Side by side in one run, `gpumesh up` as it starts by default, every request a durable job: OIP in JSON,
 * OIP with the binary tensor data extension, and the same job through `/v1/jobs` with `Prefer: wait`; each at
 * concurrency 1 and 16. And the same OIP JSON request to `simple-worker`, the same file added with `gpumesh models add`
 * with its session in a worker process (OnnxSettings.process `worker`, any model's default) where the built-in
 * `simple` has it in the agent's own process (`agent`): what the process hop costs. Prints a table, writes
 * bench/out/oip.json.
 *
 *   npm run bench:oip -- [--requests 3000] [--warmup 2000]
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { buildSimple } from '../src/builtin-models/index.js';
import { removeDir, startMesh } from '../test/helpers/mesh.js';
import { gpumeshRun } from '../test/helpers/processes.js';
import { printTable, summarize, writeResults, machine } from './lib.js';
import { BenchClient } from './mesh-client.js';

const { values } = parseArgs({ options: { requests: { type: 'string', default: '3000' }, warmup: { type: 'string', default: '2000' } } });
const REQUESTS = Number(values.requests);
const WARMUP = Number(values.warmup);
const TARGET = { inferPerSecond: 1408, averageUs: 708 };

const A = Array.from({ length: 16 }, (_, i) => i);
const B = Array.from({ length: 16 }, () => 1);
const jsonBody = JSON.stringify({ inputs: [{ name: 'INPUT0', shape: [1, 16], datatype: 'INT32', data: A }, { name: 'INPUT1', shape: [1, 16], datatype: 'INT32', data: B }] });
const binaryHeader = JSON.stringify({
  inputs: [{ name: 'INPUT0', shape: [1, 16], datatype: 'INT32', parameters: { binary_data_size: 64 } }, { name: 'INPUT1', shape: [1, 16], datatype: 'INT32', parameters: { binary_data_size: 64 } }],
  parameters: { binary_data_output: true },
});
const int32s = (list: number[]): Buffer => Buffer.from(new Int32Array(list).buffer);
const binaryBody = Buffer.concat([Buffer.from(binaryHeader), int32s(A), int32s(B)]);
const jobBody = JSON.stringify({ type: 'tensor', model: 'simple', input: { inputs: { INPUT0: { shape: [1, 16], data: A }, INPUT1: { shape: [1, 16], data: B } } } });

type Mode = 'oip json' | 'oip binary' | '/v1/jobs Prefer: wait' | 'oip json, worker process';
const MODES: Mode[] = ['oip json', 'oip binary', '/v1/jobs Prefer: wait', 'oip json, worker process'];

async function once(client: BenchClient, mode: Mode): Promise<number> {
  const started = performance.now();
  let reply;
  if (mode === 'oip json') reply = await client.request('POST', '/v2/models/simple/infer', jsonBody);
  else if (mode === 'oip json, worker process') reply = await client.request('POST', '/v2/models/simple-worker/infer', jsonBody);
  else if (mode === 'oip binary') {
    reply = await client.request('POST', '/v2/models/simple/infer', binaryBody, {
      'content-type': 'application/octet-stream', 'inference-header-content-length': String(Buffer.byteLength(binaryHeader)),
    });
  } else reply = await client.request('POST', '/v1/jobs', jobBody, { prefer: 'wait=30' });
  if (reply.status !== 200) throw new Error(`${mode}: ${reply.status} ${reply.text.slice(0, 200)}`);
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
    for (const mode of MODES) {
      const { latencies, seconds } = await measure(client, mode, concurrency, REQUESTS);
      const summary = summarize(latencies);
      const rate = REQUESTS / seconds;
      const average = latencies.reduce((sum, value) => sum + value, 0) / latencies.length;
      rows.push([mode, concurrency, Math.round(rate), (average * 1000).toFixed(0), summary.p50.toFixed(3), summary.p99.toFixed(3)]);
      results.push({ mode, concurrency, requests: REQUESTS, inferPerSecond: rate, averageMs: average, ...summary });
    }
  }
  client.close();
  printTable(`simple, every request a durable job (${REQUESTS} requests each, after ${WARMUP} warm-up per mode)`, ['path', 'concurrency', 'infer/s', 'avg µs', 'p50 ms', 'p99 ms'], rows);
  const oipOne = results.filter((result) => result.concurrency === 1 && (result.mode === 'oip json' || result.mode === 'oip binary'));
  const best = Math.max(...oipOne.map((result) => result.inferPerSecond as number));
  process.stdout.write(`\ntarget: OIP at concurrency 1 ≥ ${TARGET.inferPerSecond} infer/s (Triton's perf_analyzer quick start, ${TARGET.averageUs} µs average): best ${Math.round(best)} infer/s — ${best >= TARGET.inferPerSecond ? 'met' : 'NOT met'}\n`);
  const rate = (mode: Mode, concurrency: number): number => results.find((result) => result.mode === mode && result.concurrency === concurrency)!.inferPerSecond as number;
  for (const concurrency of [1, 16]) process.stdout.write(`in the agent's process ÷ a worker process, OIP JSON at concurrency ${concurrency}: ${(rate('oip json', concurrency) / rate('oip json, worker process', concurrency)).toFixed(2)}×\n`);
  process.stdout.write(`wrote ${writeResults('oip', { machine: machine(), target: TARGET, results })}\n`);
} finally {
  await mesh.stop();
  removeDir(mesh.data);
}
