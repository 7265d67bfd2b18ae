/**
 * Work-conserving batching against the older rule, side by side in one run.
 * The tiny `mlp` tensor model (maxQueueDelayMs 2, preferred batch sizes 8/16/32):
 *  - low load: one job at a time — the latency a lone job pays;
 *  - high load: a closed loop with many jobs in flight — the throughput batching buys.
 * `while-arriving` (the default) holds a partial batch on an idle replica only while
 * arrivals promise company; `always` holds it for the whole maxQueueDelayMs.
 *
 * Both meshes are up for the whole run and measured in alternating rounds (one policy then the other, then the
 * other way round), after a long warm-up of each: the VM's speed drifts by tens of percent within a minute, and
 * V8 is still compiling the hot path after a few hundred jobs (bench/NOTES.md, "Why 5,000 warm-up runs"). Medians of the rounds.
 *
 *   npm run bench:batching-policy -- [--lone 500] [--jobs 5000] [--inflight 64] [--rounds 3] [--warmup 3000]
 */
import { parseArgs } from 'node:util';
import { removeDir, startMesh, type RunningMesh } from '../test/helpers/mesh.js';
import { printTable, summarize, writeResults, type Summary } from './lib.js';
import { BenchClient, mlpJob } from './mesh-client.js';

const { values } = parseArgs({
  options: {
    lone: { type: 'string', default: '500' }, jobs: { type: 'string', default: '5000' }, inflight: { type: 'string', default: '64' },
    rounds: { type: 'string', default: '3' }, warmup: { type: 'string', default: '3000' },
  },
});
const LONE = Number(values.lone);
const JOBS = Number(values.jobs);
const INFLIGHT = Number(values.inflight);
const ROUNDS = Number(values.rounds);
const WARMUP = Number(values.warmup);

type Policy = 'while-arriving' | 'always';
const POLICIES: Policy[] = ['while-arriving', 'always'];

interface Side { mesh: RunningMesh; client: BenchClient; lone: number[]; loaded: number[]; throughputs: number[] }

async function up(policy: Policy): Promise<Side> {
  const mesh = await startMesh({ env: { GPUMESH_LOG_LEVEL: 'warn' }, config: { batching: { holdPartial: policy }, models: { mlp: { maxQueueSize: 100_000 } } } });
  const client = new BenchClient(mesh.url, mesh.admin, INFLIGHT);
  await client.listen();
  return { mesh, client, lone: [], loaded: [], throughputs: [] };
}

/** Keep INFLIGHT jobs outstanding until `count` are done; returns jobs/s and each job's latency. */
async function closedLoop(client: BenchClient, count: number, offset: number): Promise<{ throughput: number; latencies: number[] }> {
  let next = 0;
  const latencies: number[] = [];
  const start = performance.now();
  await Promise.all(Array.from({ length: INFLIGHT }, async () => {
    while (next < count) latencies.push(await client.run(mlpJob(offset + next++)));
  }));
  return { throughput: count / ((performance.now() - start) / 1000), latencies };
}

const sides = {} as Record<Policy, Side>;
try {
  for (const policy of POLICIES) sides[policy] = await up(policy);
  for (const policy of POLICIES) {
    // Warm-up: the model's load, then the JIT, one at a time and loaded.
    for (let i = 0; i < WARMUP / 2; i++) await sides[policy].client.run(mlpJob(-i));
    await closedLoop(sides[policy].client, WARMUP / 2, -WARMUP);
  }
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? POLICIES : [...POLICIES].reverse();
    for (const policy of order) {
      const side = sides[policy];
      for (let i = 0; i < LONE; i++) side.lone.push(await side.client.run(mlpJob(i)));
    }
    for (const policy of order) {
      const side = sides[policy];
      const { throughput, latencies } = await closedLoop(side.client, JOBS, round * JOBS);
      side.throughputs.push(throughput);
      side.loaded.push(...latencies);
      process.stdout.write(`round ${round + 1}: ${policy} ${throughput.toFixed(0)} jobs/s loaded\n`);
    }
  }
} finally {
  for (const side of Object.values(sides)) {
    side.client.close();
    await side.mesh.stop();
    removeDir(side.mesh.data);
  }
}

const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
interface PolicyResult { policy: Policy; lone: Summary; throughput: number; rounds: number[]; loaded: Summary }
const results: PolicyResult[] = POLICIES.map((policy) => ({
  policy, lone: summarize(sides[policy].lone), throughput: median(sides[policy].throughputs), rounds: sides[policy].throughputs, loaded: summarize(sides[policy].loaded),
}));
printTable(`mlp: ${LONE} lone jobs one at a time, then ${JOBS} jobs with ${INFLIGHT} in flight, per round; ${ROUNDS} rounds in turn (jobs/s: median round; latency in ms)`,
  ['policy', 'lone p50', 'lone p99', 'jobs/s loaded', 'rounds', 'loaded p50', 'loaded p99'],
  results.map((r) => [r.policy, r.lone.p50, r.lone.p99, r.throughput, r.rounds.map((value) => value.toFixed(0)).join(' / '), r.loaded.p50, r.loaded.p99]));
const [conserving, holding] = results as [PolicyResult, PolicyResult];
process.stdout.write(`\nlone job p50: ${conserving.lone.p50.toFixed(2)} vs ${holding.lone.p50.toFixed(2)} ms (${(conserving.lone.p50 - holding.lone.p50).toFixed(2)} ms); `
  + `throughput under load: ${(conserving.throughput / holding.throughput).toFixed(2)}× the older rule's\n`);
process.stdout.write(`wrote ${writeResults('batching-policy', { lone: LONE, jobs: JOBS, inflight: INFLIGHT, rounds: ROUNDS, warmup: WARMUP, results })}\n`);
