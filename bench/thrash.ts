/**
 * Thrash: two models that cannot both fit on the one device of a real mesh (`gpumesh up --cpu-budget 1000`; each
 * model declares 600 MB), each a server the agent starts from its command template (the OpenAI-style image stand-in,
 * test/fixtures/standins/openai-images-standin.ts, serving only its own model, with a declared start delay), so
 * every swap stops one server and starts the other. Jobs alternate A, B, A, B…; the same load runs under the two
 * swap policies (`scheduling.swapPolicy` in mesh.yaml), a fresh mesh each, side by side in one run:
 *
 *   lru                 a batch goes as soon as a slot is free; the agent evicts its least recently used idle model
 *   batch-before-swap   the host keeps its model while batches are ready for it, for at most maxSwapHoldMs
 *
 * Two loads: `burst` (all jobs in one bulk submit, in alternating order) and `stream` (one job every --gap-ms, in
 * alternating order). Jobs/s is the jobs over the time from the first submit to the last terminal event. Swaps are
 * counted from the agent's own log (each `model loaded` after the first is a swap) and checked against the jobs'
 * records (attempts that waited for a load).
 *
 *   npm run bench:thrash -- [--jobs 200] [--gap-ms 20] [--start-delay-ms 150] [--hold-ms 5000] [--modes burst,stream]
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { removeDir, ROOT, startMesh } from '../test/helpers/mesh.js';
import { percentile, printTable, writeResults } from './lib.js';
import { BenchClient } from './mesh-client.js';

const { values } = parseArgs({
  options: {
    jobs: { type: 'string', default: '200' }, 'gap-ms': { type: 'string', default: '20' }, 'start-delay-ms': { type: 'string', default: '150' },
    'hold-ms': { type: 'string', default: '5000' }, modes: { type: 'string', default: 'burst,stream' }, 'batch-size': { type: 'string', default: '4' },
  },
});
const JOBS = Number(values.jobs);
const GAP_MS = Number(values['gap-ms']);
const START_DELAY_MS = Number(values['start-delay-ms']);
const HOLD_MS = Number(values['hold-ms']);
const BATCH = Number(values['batch-size']);
const SLOW_MS = 10;
const MODES = values.modes.split(',') as Array<'burst' | 'stream'>;
const POLICIES = ['lru', 'batch-before-swap'] as const;
type Policy = (typeof POLICIES)[number];
const STANDIN = join(ROOT, 'test/fixtures/standins/openai-images-standin.ts');

const server = (name: string) => ({
  engine: 'openai-images', types: ['image'], memoryMB: 600,
  batching: { maxBatchSize: BATCH },
  settings: {
    model: name,
    command: `'${process.execPath}' --import tsx '${STANDIN}' --port \${PORT} --models ${name} --slow-ms ${SLOW_MS} --start-delay-ms ${START_DELAY_MS}`,
    readiness: { http: '/v1/models', timeoutMs: 60_000, intervalMs: 50 },
    stopGraceMs: 2000,
  },
});

interface Outcome {
  policy: Policy;
  mode: 'burst' | 'stream';
  jobs: number;
  succeeded: number;
  failed: number;
  wallMs: number;
  jobsPerSecond: number;
  /** Models loaded on the agent (its log), and swaps: every load after the first. */
  loads: number;
  swaps: number;
  /** Batches whose jobs waited for a load (the jobs' records). */
  batchesWithLoad: number;
  batches: number;
  /** Model changes between consecutive batches, in the order they started. */
  modelChanges: number;
  latencyMs: { p50: number; p90: number; max: number };
  /** Swaps held back (batch-before-swap), and how long each held to its bound was held (the orchestrator's log). */
  holds: number;
  heldToBoundMs: number[];
}

async function runOne(policy: Policy, mode: 'burst' | 'stream'): Promise<Outcome> {
  const mesh = await startMesh({
    args: ['--cpu-budget', '1000'],
    config: { models: { a: server('a'), b: server('b') }, scheduling: { swapPolicy: policy, maxSwapHoldMs: HOLD_MS } },
  });
  const client = new BenchClient(mesh.url, mesh.admin, 8);
  try {
    await client.listen();
    const job = (i: number) => ({ type: 'image', model: i % 2 === 0 ? 'a' : 'b', input: { prompt: `thrash ${i}`, seed: i, width: 64, height: 64 } });
    const submitted = new Map<string, number>();
    const start = performance.now();
    if (mode === 'burst') {
      const reply = await client.request('POST', '/v1/jobs:batch', JSON.stringify({ jobs: Array.from({ length: JOBS }, (_, i) => job(i)) }));
      if (reply.status !== 207) throw new Error(`bulk submit: ${reply.status} ${reply.text}`);
      const { results } = JSON.parse(reply.text) as { results: Array<{ status: number; id?: string; error?: unknown }> };
      for (const result of results) {
        if (!result.id) throw new Error(`a job was refused: ${JSON.stringify(result)}`);
        submitted.set(result.id, start);
      }
    } else {
      for (let i = 0; i < JOBS; i++) {
        const due = start + i * GAP_MS;
        const wait = due - performance.now();
        if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
        const at = performance.now();
        submitted.set(await client.submit(job(i)), at);
      }
    }
    const ends = await Promise.all([...submitted.keys()].map((id) => client.completion(id)));
    const wallMs = Math.max(...ends.map((end) => end.at)) - start;
    const latencies = [...submitted.entries()].map(([id, at]) => client.ended(id)!.at - at);

    // The jobs' records: batches in the order they started, and which waited for a load.
    const batches = new Map<string, { model: string; startedAt: string; loaded: boolean }>();
    let succeeded = 0;
    for (const id of submitted.keys()) {
      const view = JSON.parse((await client.request('GET', `/v1/jobs/${id}`)).text) as {
        status: string; model: string; attempts: Array<{ status: string; batchId: string; startedAt: string | null; loadMs: number | null }>;
      };
      if (view.status === 'succeeded') succeeded++;
      for (const attempt of view.attempts) {
        if (attempt.status !== 'succeeded' || !attempt.startedAt) continue;
        batches.set(attempt.batchId, { model: view.model, startedAt: attempt.startedAt, loaded: (attempt.loadMs ?? 0) > 0 });
      }
    }
    const order = [...batches.values()].sort((x, y) => x.startedAt.localeCompare(y.startedAt));
    const modelChanges = order.filter((batch, index) => index > 0 && batch.model !== order[index - 1]!.model).length;

    // The agent's own count of loads.
    const log = readFileSync(join(mesh.data, 'logs', 'agent.log'), 'utf8').split('\n');
    const loads = log.filter((line) => line.includes('"msg":"model loaded"') && /"model":"[ab]"/.test(line)).length;
    // The orchestrator's log: holds started (a swap held back), and those that ran to maxSwapHoldMs (a hold that ends
    // because the held model has no ready batch left ends silently; one that reaches its bound logs how long it held).
    const orchestratorLog = readFileSync(join(mesh.data, 'logs', 'orchestrator.log'), 'utf8').split('\n');
    const holds = orchestratorLog.filter((line) => line.includes('holding a model swap')).length;
    const heldToBound = orchestratorLog.filter((line) => line.includes('swapping models after a hold')).map((line) => (JSON.parse(line) as { heldMs: number }).heldMs);
    return {
      policy, mode, jobs: JOBS, succeeded, failed: JOBS - succeeded, wallMs, jobsPerSecond: JOBS / (wallMs / 1000),
      loads, swaps: Math.max(0, loads - 1), batchesWithLoad: order.filter((batch) => batch.loaded).length, batches: order.length, modelChanges,
      latencyMs: { p50: percentile(latencies, 50), p90: percentile(latencies, 90), max: Math.max(...latencies) },
      holds, heldToBoundMs: heldToBound,
    };
  } finally {
    client.close();
    await mesh.stop();
    removeDir(mesh.data);
  }
}

const outcomes: Outcome[] = [];
for (const mode of MODES) {
  for (const policy of POLICIES) {
    const outcome = await runOne(policy, mode);
    process.stdout.write(`${mode} ${policy}: ${outcome.jobsPerSecond.toFixed(1)} jobs/s, ${outcome.swaps} swaps, ${outcome.failed} failed\n`);
    outcomes.push(outcome);
  }
}

const rows: (string | number)[][] = [];
const ratios: Record<string, { jobsPerSecond: number; swaps: number }> = {};
for (const mode of MODES) {
  const lru = outcomes.find((outcome) => outcome.mode === mode && outcome.policy === 'lru')!;
  const held = outcomes.find((outcome) => outcome.mode === mode && outcome.policy === 'batch-before-swap')!;
  for (const outcome of [lru, held]) {
    rows.push([mode, outcome.policy, String(outcome.jobs), String(outcome.failed), outcome.wallMs, outcome.jobsPerSecond, String(outcome.swaps), String(outcome.batches), String(outcome.batchesWithLoad),
      outcome.latencyMs.p50, outcome.latencyMs.p90, outcome.latencyMs.max, String(outcome.holds), String(outcome.heldToBoundMs.length)]);
  }
  ratios[mode] = { jobsPerSecond: held.jobsPerSecond / lru.jobsPerSecond, swaps: held.swaps / Math.max(1, lru.swaps) };
}
printTable(`${JOBS} jobs alternating between two 600 MB models on a 1000 MB device (stand-in servers, ${START_DELAY_MS} ms start delay, ${SLOW_MS} ms an image, batches of ≤ ${BATCH}; stream: one job every ${GAP_MS} ms)`,
  ['load', 'policy', 'jobs', 'failed', 'wall ms', 'jobs/s', 'swaps', 'batches', 'batches that loaded', 'latency p50', 'p90', 'max', 'holds', 'held to bound'], rows);
for (const [mode, ratio] of Object.entries(ratios)) {
  process.stdout.write(`${mode}: batch-before-swap / lru = ${ratio.jobsPerSecond.toFixed(2)}× the jobs/s with ${ratio.swaps.toFixed(2)}× the swaps\n`);
}
const path = writeResults('thrash', {
  jobs: JOBS, gapMs: GAP_MS, startDelayMs: START_DELAY_MS, slowMs: SLOW_MS, maxSwapHoldMs: HOLD_MS, maxBatchSize: BATCH, cpuBudgetMB: 1000, modelMB: 600,
  outcomes, ratios,
});
process.stdout.write(`\nwrote ${path}\n`);
