/**
 * Work-conserving batching against the older rule, side by side in one run.
 * The tiny `mlp` tensor model (maxQueueDelayMs 2, preferred batch sizes 8/16/32):
 *  - low load: one job at a time — the latency a lone job pays;
 *  - high load: a closed loop with many jobs in flight — the throughput batching buys.
 * `while-arriving` (the default) holds a partial batch on an idle replica only while
 * arrivals promise company; `always` holds it for the whole maxQueueDelayMs.
 *
 *   npm run bench:batching-policy -- [--lone 400] [--jobs 3000] [--inflight 64]
 */
import { parseArgs } from 'node:util';
import { MLP_INPUT_DIM } from '../src/models/index.js';
import { removeDir, startMesh } from '../test/helpers/mesh.js';
import { printTable, summarize, writeResults, type Summary } from './lib.js';
import { BenchClient } from './mesh-client.js';

const { values } = parseArgs({ options: { lone: { type: 'string', default: '400' }, jobs: { type: 'string', default: '3000' }, inflight: { type: 'string', default: '64' } } });
const LONE = Number(values.lone);
const JOBS = Number(values.jobs);
const INFLIGHT = Number(values.inflight);
const job = (i: number) => ({ type: 'tensor', input: { x: Array.from({ length: MLP_INPUT_DIM }, (_, k) => Math.sin(i + k)) } });

interface PolicyResult { policy: string; lone: Summary; throughput: number; loaded: Summary }

async function measure(policy: 'while-arriving' | 'always'): Promise<PolicyResult> {
  const mesh = await startMesh({ env: { GPUMESH_LOG_LEVEL: 'warn' }, config: { batching: { holdPartial: policy }, models: { mlp: { maxQueueSize: 100_000 } } } });
  const client = new BenchClient(mesh.url, mesh.admin, INFLIGHT);
  try {
    await client.listen();
    for (let i = 0; i < 100; i++) await client.run(job(-i)); // warm-up: model load, JIT
    const lone: number[] = [];
    for (let i = 0; i < LONE; i++) lone.push(await client.run(job(i)));
    let next = 0;
    const latencies: number[] = [];
    const start = performance.now();
    await Promise.all(Array.from({ length: INFLIGHT }, async () => {
      while (next < JOBS) {
        const i = next++;
        latencies.push(await client.run(job(i)));
      }
    }));
    const seconds = (performance.now() - start) / 1000;
    return { policy, lone: summarize(lone), throughput: JOBS / seconds, loaded: summarize(latencies) };
  } finally {
    client.close();
    await mesh.stop();
    removeDir(mesh.data);
  }
}

const results = [await measure('while-arriving'), await measure('always')];
printTable(`mlp: ${LONE} lone jobs one at a time; then ${JOBS} jobs with ${INFLIGHT} in flight (latency in ms)`,
  ['policy', 'lone p50', 'lone p99', 'jobs/s loaded', 'loaded p50', 'loaded p99'],
  results.map((r) => [r.policy, r.lone.p50, r.lone.p99, r.throughput, r.loaded.p50, r.loaded.p99]));
const [conserving, holding] = results as [PolicyResult, PolicyResult];
process.stdout.write(`\nlone job p50: ${conserving.lone.p50.toFixed(2)} vs ${holding.lone.p50.toFixed(2)} ms (${(conserving.lone.p50 - holding.lone.p50).toFixed(2)} ms); `
  + `throughput under load: ${(conserving.throughput / holding.throughput).toFixed(2)}× the older rule's\n`);
process.stdout.write(`wrote ${writeResults('batching-policy', { lone: LONE, jobs: JOBS, inflight: INFLIGHT, results })}\n`);
