/**
 * What the throughput benchmarks share: a system under test (gpumesh, BullMQ on Redis) as a single submit that
 * resolves at its job's completion and a bulk submit, and the closed loop that keeps a number of jobs in flight.
 */
import { fork, spawn } from 'node:child_process';
import { once } from 'node:events';
import { Queue, QueueEvents } from 'bullmq';
import { freePort } from '../test/helpers/processes.js';
import { removeDir, tempDir, waitFor } from '../test/helpers/mesh.js';
import { mlpSample } from './mesh-client.js';

export interface Result { name: string; seconds: number; jobsPerSecond: number; latencies: number[] }

/** One system under test, up and connected: a single submit that resolves at its job's completion, and a bulk submit. */
export interface System {
  name: string;
  /** Submit one job; resolves when it has completed. */
  single(i: number): Promise<void>;
  /** Submit these jobs in one request; resolves once they are accepted, with each one's completion time. */
  bulk(indices: number[]): Promise<Promise<number>[]>;
  /** Its processes on this machine, as they are now (the server and its workers; the client's is the benchmark's own). */
  processes(): number[];
  close(): Promise<void>;
}

/** Keep `inflight` jobs outstanding until `jobs` are done; `submit` resolves when its job completes. */
export async function closedLoop(name: string, jobs: number, inflight: number, submit: (i: number) => Promise<void>): Promise<Result> {
  const latencies: number[] = [];
  let next = 0;
  const start = performance.now();
  const lane = async (): Promise<void> => {
    while (next < jobs) {
      const i = next++;
      const t0 = performance.now();
      await submit(i);
      latencies.push(performance.now() - t0);
    }
  };
  await Promise.all(Array.from({ length: inflight }, lane));
  const seconds = (performance.now() - start) / 1000;
  return { name, seconds, jobsPerSecond: jobs / seconds, latencies };
}

/**
 * BullMQ on a redis-server of its own (AOF, fsync every second: durability like gpumesh's), one worker process
 * running the same `mlp` model (bullmq-worker.ts). Needs redis-server (Debian: apt-get install redis-server).
 */
export async function bullmq(): Promise<System> {
  const port = await freePort();
  const dir = tempDir('gpumesh-redis-');
  // Durability like gpumesh's (every job written to a log the OS flushes, fsync about once a second): Redis's AOF with everysec.
  const redis = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'yes', '--appendfsync', 'everysec', '--dir', dir], { stdio: 'ignore' });
  // A redis-server that is not installed, or that stops at once, ends the bench with the reason: BullMQ's client would
  // otherwise wait for it forever.
  const redisFailed = new Promise<never>((_, reject) => {
    redis.once('error', (error) => reject(new Error(`cannot start redis-server (${error.message}): bench:dispatch needs it (Debian: apt-get install redis-server)`)));
    redis.once('exit', (code, signal) => reject(new Error(`redis-server exited at once (${signal ?? `code ${code}`})`)));
  });
  redisFailed.catch(() => {}); // awaited below; a later exit (close()) is expected
  const connection = { host: '127.0.0.1', port };
  await Promise.race([redisFailed, waitFor(async () => {
    const probe = new Queue('probe', { connection });
    try { await probe.waitUntilReady(); return true; } catch { return false; } finally { await probe.close().catch(() => {}); }
  }, { what: 'redis-server' })]);
  const worker = fork(new URL('./bullmq-worker.ts', import.meta.url).pathname, [String(port), 'bench'], { execArgv: ['--import', 'tsx'], stdio: 'inherit' });
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
  return {
    name: 'BullMQ + Redis',
    single: async (i) => {
      const job = await queue.add('tensor', { x: mlpSample(i) }, options);
      await completion(job.id!);
    },
    bulk: async (indices) => {
      const jobs = await queue.addBulk(indices.map((i) => ({ name: 'tensor', data: { x: mlpSample(i) }, opts: options })));
      return jobs.map((job) => completion(job.id!));
    },
    processes: () => [redis.pid!, worker.pid!],
    close: async () => {
      await events.close();
      await queue.close();
      worker.kill('SIGTERM');
      redis.kill('SIGTERM');
      await Promise.all([once(worker, 'exit'), once(redis, 'exit')]);
      removeDir(dir);
    },
  };
}
