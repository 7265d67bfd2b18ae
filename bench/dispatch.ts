/**
 * Dispatch throughput: many tiny jobs (the mlp tensor model, one 64-value
 * sample each) through gpumesh and through BullMQ on a local Redis, same
 * machine, same run, one worker process each. Two rows per system:
 *  - single submits, the same number of jobs kept in flight (closed loop);
 *  - bulk submits (gpumesh's POST /v1/jobs:batch, BullMQ's addBulk), every job
 *    sent in chunks as fast as the system takes them.
 * Reports jobs/s and submit→completion latency.
 *
 *   npm run bench:dispatch -- [--jobs 10000] [--inflight 64] [--warmup 5000] [--chunk 500]
 * The warm-up is long because V8 is still compiling the orchestrator's hot path after a few hundred jobs: a short one
 * measures the JIT's warm-up, not the steady state of a running mesh (bench/RESULTS.md).
 * Needs redis-server (Debian: apt-get install redis-server); the benchmark starts and stops its own.
 */
import { fork, spawn } from 'node:child_process';
import { once } from 'node:events';
import { parseArgs } from 'node:util';
import { Queue, QueueEvents } from 'bullmq';
import { MLP_INPUT_DIM } from '../src/models/index.js';
import { freePort } from '../test/helpers/processes.js';
import { removeDir, startMesh, tempDir, waitFor } from '../test/helpers/mesh.js';
import { printTable, summarize, writeResults, type Summary } from './lib.js';
import { BenchClient } from './mesh-client.js';

const { values } = parseArgs({
  options: { jobs: { type: 'string', default: '10000' }, inflight: { type: 'string', default: '64' }, warmup: { type: 'string', default: '5000' }, chunk: { type: 'string', default: '500' } },
});
const CHUNK = Number(values.chunk);
const JOBS = Number(values.jobs);
const INFLIGHT = Number(values.inflight);
const WARMUP = Number(values.warmup);
const sample = (i: number): number[] => Array.from({ length: MLP_INPUT_DIM }, (_, k) => Math.sin(i + k));

interface Result { name: string; seconds: number; jobsPerSecond: number; latency: Summary }

/**
 * Keep INFLIGHT jobs outstanding until JOBS are done; `submit` resolves when
 * its job completes. A warm-up of WARMUP jobs (model load, JIT) runs first, unmeasured.
 */
async function closedLoop(name: string, submit: (i: number) => Promise<void>): Promise<Result> {
  for (let i = 0; i < WARMUP; i += INFLIGHT) await Promise.all(Array.from({ length: INFLIGHT }, (_, k) => submit(-1 - i - k)));
  const latencies: number[] = [];
  let next = 0;
  const start = performance.now();
  const lane = async (): Promise<void> => {
    while (next < JOBS) {
      const i = next++;
      const t0 = performance.now();
      await submit(i);
      latencies.push(performance.now() - t0);
    }
  };
  await Promise.all(Array.from({ length: INFLIGHT }, lane));
  const seconds = (performance.now() - start) / 1000;
  return { name, seconds, jobsPerSecond: JOBS / seconds, latency: summarize(latencies) };
}

/**
 * Send all JOBS in chunks of CHUNK, one chunk after another as soon as the last was accepted; `submit`
 * returns each chunk's completions. Latency is from the chunk's send to each job's completion.
 */
async function bulk(name: string, submit: (indices: number[]) => Promise<Promise<number>[]>): Promise<Result> {
  const completions: Promise<number>[] = [];
  const latencies: number[] = [];
  const start = performance.now();
  for (let first = 0; first < JOBS; first += CHUNK) {
    const sent = performance.now();
    const indices = Array.from({ length: Math.min(CHUNK, JOBS - first) }, (_, k) => first + k);
    for (const done of await submit(indices)) completions.push(done.then((at) => { latencies.push(at - sent); return at; }));
  }
  await Promise.all(completions);
  const seconds = (performance.now() - start) / 1000;
  return { name, seconds, jobsPerSecond: JOBS / seconds, latency: summarize(latencies) };
}

async function gpumesh(): Promise<Result[]> {
  const mesh = await startMesh({ env: { GPUMESH_LOG_LEVEL: 'warn' }, config: { models: { mlp: { maxQueueSize: 100_000 } }, queues: { maxTotal: 100_000 } } });
  const client = new BenchClient(mesh.url, mesh.admin, INFLIGHT);
  try {
    await client.listen();
    const single = await closedLoop('gpumesh, single submits', async (i) => {
      await client.run({ type: 'tensor', input: { x: sample(i) } });
    });
    const many = await bulk('gpumesh, bulk submits', async (indices) => {
      const reply = await client.request('POST', '/v1/jobs:batch', JSON.stringify({ jobs: indices.map((i) => ({ type: 'tensor', input: { x: sample(i) } })) }));
      if (reply.status !== 207) throw new Error(`bulk submit failed: ${reply.status} ${reply.text}`);
      const results = (JSON.parse(reply.text) as { results: { status: number; id?: string }[] }).results;
      return results.map((result) => {
        if (result.status !== 202) throw new Error(`a bulk item was refused: ${JSON.stringify(result)}`);
        return client.completion(result.id!).then((end) => end.at);
      });
    });
    return [single, many];
  } finally {
    client.close();
    await mesh.stop();
    removeDir(mesh.data);
  }
}

async function bullmq(): Promise<Result[]> {
  const port = await freePort();
  const dir = tempDir('gpumesh-redis-');
  // Durability like gpumesh's (every job written to a log the OS flushes, fsync about once a second): Redis's AOF with everysec.
  const redis = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'yes', '--appendfsync', 'everysec', '--dir', dir], { stdio: 'ignore' });
  const worker = fork(new URL('./bullmq-worker.ts', import.meta.url).pathname, [String(port), 'bench'], { execArgv: ['--import', 'tsx'], stdio: 'inherit' });
  try {
    const connection = { host: '127.0.0.1', port };
    await waitFor(async () => {
      const probe = new Queue('probe', { connection });
      try { await probe.waitUntilReady(); return true; } catch { return false; } finally { await probe.close().catch(() => {}); }
    }, { what: 'redis-server' });
    const queue = new Queue('bench', { connection });
    const events = new QueueEvents('bench', { connection });
    await events.waitUntilReady();
    await once(worker, 'message');
    const waiting = new Map<string, (at: number) => void>();
    const early = new Map<string, number>();
    const settle = ({ jobId }: { jobId: string }): void => {
      const at = performance.now();
      const resolve = waiting.get(jobId);
      if (resolve) { waiting.delete(jobId); resolve(at); } else early.set(jobId, at);
    };
    const completion = (id: string): Promise<number> => {
      const at = early.get(id);
      if (at !== undefined) { early.delete(id); return Promise.resolve(at); }
      return new Promise<number>((resolve) => waiting.set(id, resolve));
    };
    events.on('completed', settle);
    events.on('failed', settle);
    const options = { removeOnComplete: true, removeOnFail: true };
    const single = await closedLoop('BullMQ + Redis, add', async (i) => {
      const job = await queue.add('tensor', { x: sample(i) }, options);
      await completion(job.id!);
    });
    const many = await bulk('BullMQ + Redis, addBulk', async (indices) => {
      const jobs = await queue.addBulk(indices.map((i) => ({ name: 'tensor', data: { x: sample(i) }, opts: options })));
      return jobs.map((job) => completion(job.id!));
    });
    await events.close();
    await queue.close();
    return [single, many];
  } finally {
    worker.kill('SIGTERM');
    redis.kill('SIGTERM');
    await Promise.all([once(worker, 'exit'), once(redis, 'exit')]);
    removeDir(dir);
  }
}

const [oursSingle, oursBulk] = await gpumesh();
const [theirsSingle, theirsBulk] = await bullmq();
const results = [oursSingle!, theirsSingle!, oursBulk!, theirsBulk!];
printTable(`${JOBS} tiny tensor jobs, one worker process each; single: ${INFLIGHT} in flight; bulk: chunks of ${CHUNK} (latency in ms)`,
  ['system', 'jobs/s', 'p50', 'p90', 'p99', 'seconds'],
  results.map((result) => [result.name, result.jobsPerSecond, result.latency.p50, result.latency.p90, result.latency.p99, result.seconds]));
const compare = (ours: Result, theirs: Result): { ratio: number; line: string } => {
  const ratio = ours.jobsPerSecond / theirs.jobsPerSecond;
  return { ratio, line: `${ours.name} / ${theirs.name}: ${ratio.toFixed(2)}× the throughput, p99 ${ours.latency.p99.toFixed(1)} vs ${theirs.latency.p99.toFixed(1)} ms` };
};
const single = compare(oursSingle!, theirsSingle!);
const many = compare(oursBulk!, theirsBulk!);
process.stdout.write(`\n${single.line} (target ≥ 2× at a lower p99)\n${many.line}\n`);
process.stdout.write(`wrote ${writeResults('dispatch', { jobs: JOBS, inflight: INFLIGHT, chunk: CHUNK, results, ratio: single.ratio, bulkRatio: many.ratio })}\n`);
