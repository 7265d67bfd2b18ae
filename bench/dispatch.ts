/**
 * Dispatch throughput: many tiny jobs (the mlp tensor model, one 64-value
 * sample each) through gpumesh and through BullMQ on a local Redis, same
 * machine, same run, one worker process each, the same number of jobs kept in
 * flight. Reports jobs/s and submit→completion latency.
 *
 *   npm run bench:dispatch -- [--jobs 3000] [--inflight 64] [--warmup 500]
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

const { values } = parseArgs({ options: { jobs: { type: 'string', default: '3000' }, inflight: { type: 'string', default: '64' }, warmup: { type: 'string', default: '500' } } });
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

async function gpumesh(): Promise<Result> {
  const mesh = await startMesh({ env: { GPUMESH_LOG_LEVEL: 'warn' }, config: { models: { mlp: { maxQueueSize: 100_000 } } } });
  const client = new BenchClient(mesh.url, mesh.admin, INFLIGHT);
  try {
    await client.listen();
    return await closedLoop('gpumesh', async (i) => {
      await client.run({ type: 'tensor', input: { x: sample(i) } });
    });
  } finally {
    client.close();
    await mesh.stop();
    removeDir(mesh.data);
  }
}

async function bullmq(): Promise<Result> {
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
    const waiting = new Map<string, () => void>();
    const early = new Set<string>();
    const settle = ({ jobId }: { jobId: string }): void => {
      const resolve = waiting.get(jobId);
      if (resolve) { waiting.delete(jobId); resolve(); } else early.add(jobId);
    };
    events.on('completed', settle);
    events.on('failed', settle);
    const result = await closedLoop('BullMQ + Redis', async (i) => {
      const job = await queue.add('tensor', { x: sample(i) }, { removeOnComplete: true, removeOnFail: true });
      if (!early.delete(job.id!)) await new Promise<void>((resolve) => waiting.set(job.id!, resolve));
    });
    await events.close();
    await queue.close();
    return result;
  } finally {
    worker.kill('SIGTERM');
    redis.kill('SIGTERM');
    await Promise.all([once(worker, 'exit'), once(redis, 'exit')]);
    removeDir(dir);
  }
}

const results = [await gpumesh(), await bullmq()];
printTable(`${JOBS} tiny tensor jobs, ${INFLIGHT} in flight, one worker process each (latency in ms)`,
  ['system', 'jobs/s', 'p50', 'p90', 'p99', 'seconds'],
  results.map((result) => [result.name, result.jobsPerSecond, result.latency.p50, result.latency.p90, result.latency.p99, result.seconds]));
const [ours, theirs] = results as [Result, Result];
process.stdout.write(`\ngpumesh / BullMQ: ${(ours.jobsPerSecond / theirs.jobsPerSecond).toFixed(2)}× the throughput, p99 ${ours.latency.p99.toFixed(1)} vs ${theirs.latency.p99.toFixed(1)} ms (target ≥ 2× at a lower p99)\n`);
process.stdout.write(`wrote ${writeResults('dispatch', { jobs: JOBS, inflight: INFLIGHT, results, ratio: ours.jobsPerSecond / theirs.jobsPerSecond })}\n`);
