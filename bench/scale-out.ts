/**
 * Scale-out: tiny jobs (the `mlp` tensor model, one 64-value sample) through gpumesh on SQLite, on PostgreSQL with one
 * orchestrator, on PostgreSQL with three (one runs the mesh, two stand by; the agent a process of its own joined with
 * all three URLs), and through BullMQ on Redis — side by side in one run, alternating rounds (a shared VM's speed
 * drifts), each system up for the whole run. Then the failover: the active orchestrator of the three is SIGKILLed
 * while a client submits a job every 50 ms to all three URLs, and the time until a job submitted after the kill
 * completes through another is measured. PostgreSQL is a throwaway cluster (test/helpers/postgres.ts), as in the tests.
 *
 *   npm run bench:scale-out -- [--jobs 3000] [--rounds 3] [--inflight 64] [--warmup 3000]
 *
 * Needs redis-server and PostgreSQL's binaries (npm run setup-tests installs postgresql).
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { stringify } from 'yaml';
import { MeshClient } from '../src/cli/common/client.js';
import { removeDir, startMesh, tempDir, waitFor } from '../test/helpers/mesh.js';
import { startPostgres, type RunningPostgres } from '../test/helpers/postgres.js';
import { freePort, gpumesh, type Proc } from '../test/helpers/processes.js';
import { percentile, printTable, processTree, summarize, writeResults, type Summary } from './lib.js';
import { BenchClient, mlpSample } from './mesh-client.js';
import { bullmq, closedLoop, type Result, type System } from './systems.js';

const { values } = parseArgs({
  options: { jobs: { type: 'string', default: '3000' }, rounds: { type: 'string', default: '3' }, inflight: { type: 'string', default: '64' }, warmup: { type: 'string', default: '3000' } },
});
const JOBS = Number(values.jobs);
const ROUNDS = Number(values.rounds);
const INFLIGHT = Number(values.inflight);
const WARMUP = Number(values.warmup);
const QUEUES = { models: { mlp: { maxQueueSize: 100_000 } }, queues: { maxTotal: 100_000 } };

/** A system measured through the bench client: single submits, each resolving at its job's end (from the event stream). */
async function viaClient(name: string, url: string, admin: string, processes: () => number[], close: () => Promise<void>): Promise<System> {
  const client = new BenchClient(url, admin, INFLIGHT);
  await client.listen();
  return {
    name,
    single: async (i) => {
      await client.run({ type: 'tensor', input: { x: mlpSample(i) } });
    },
    bulk: () => Promise.reject(new Error('bulk submits are bench:dispatch\'s')),
    processes,
    close: async () => {
      client.close();
      await close();
    },
  };
}

/** `gpumesh up` (the orchestrator and its agent in one process) on a store. */
async function up(name: string, store: Record<string, unknown> | null): Promise<System> {
  const mesh = await startMesh({ env: { GPUMESH_LOG_LEVEL: 'warn' }, config: { ...QUEUES, ...(store ? { store } : {}) } });
  return viaClient(name, mesh.url, mesh.admin, () => processTree(mesh.process.pid!), async () => {
    await mesh.stop();
    removeDir(mesh.data);
  });
}

/** Three `gpumesh serve` on one PostgreSQL database and one `gpumesh agent --join` with all three URLs. */
async function threeOrchestrators(postgres: RunningPostgres): Promise<System & { urls: string[]; admin: string; procs: Proc[] }> {
  const url = await postgres.createDatabase('three');
  const datas = [tempDir(), tempDir(), tempDir()];
  const urls = await Promise.all(datas.map(async () => `http://127.0.0.1:${await freePort()}`));
  const procs: Proc[] = [];
  for (const [index, data] of datas.entries()) {
    writeFileSync(join(data, 'mesh.yaml'), stringify({ ...QUEUES, store: { kind: 'postgres', url } }));
    procs.push(gpumesh(['serve', '--data', data, '--port', new URL(urls[index]!).port], { GPUMESH_LOG_LEVEL: 'warn' }));
    // One at a time: the first runs the mesh.
    if (index === 0) await waitFor(() => existsSync(join(data, 'admin.grant')), { what: 'the first orchestrator', timeoutMs: 60_000 });
  }
  const admin = readFileSync(join(datas[0]!, 'admin.grant'), 'utf8').trim();
  const { token } = await new MeshClient(urls, admin).request<{ token: string }>('POST', '/v1/grants', { kind: 'agent', host: 'bench', classes: ['tensor'] });
  procs.push(gpumesh(['agent', '--join', urls.join(','), '--grant', token, '--data', join(datas[0]!, 'agent')], { GPUMESH_LOG_LEVEL: 'warn' }));
  await waitFor(async () => (await fetch(`${urls[0]}/readyz`)).ok, { what: 'the agent to join' });
  const system = await viaClient('gpumesh, PostgreSQL, 3 orchestrators (1 active)', urls[0]!, admin, () => procs.flatMap((proc) => processTree(proc.child.pid!)), async () => {
    for (const proc of procs) await proc.kill('SIGTERM');
    for (const data of datas) removeDir(data);
  });
  return { ...system, urls, admin, procs };
}

/**
 * Kill the active orchestrator (SIGKILL) while a client submits a job every 50 ms to every URL: how long until a job
 * submitted after the kill completes, through another orchestrator.
 */
async function failover(three: Awaited<ReturnType<typeof threeOrchestrators>>): Promise<number> {
  const client = new MeshClient(three.urls, three.admin);
  const killedAt = Date.now();
  await three.procs[0]!.kill('SIGKILL');
  let firstJobMs = -1;
  while (firstJobMs < 0 && Date.now() - killedAt < 60_000) {
    const submittedAt = Date.now();
    try {
      const job = await client.submit({ type: 'tensor', model: 'mlp', input: { x: mlpSample(submittedAt) } });
      if ((await client.follow(job.id)).type === 'succeeded') firstJobMs = Date.now() - killedAt;
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
  const roles = await Promise.all(three.urls.slice(1).map(async (url) => ((await (await fetch(`${url}/healthz`)).json()) as { role?: string }).role ?? 'active'));
  if (!roles.includes('active')) throw new Error('no orchestrator took over');
  return firstJobMs;
}

const postgres = await startPostgres();
const systems: System[] = [];
const rounds = new Map<System, Result[]>();
let failoverMs: number | null = null;
try {
  const pgStore = { kind: 'postgres', url: await postgres.createDatabase('one') };
  systems.push(await up('gpumesh, SQLite', null), await up('gpumesh, PostgreSQL, 1 orchestrator', pgStore));
  const three = await threeOrchestrators(postgres);
  systems.push(three, await bullmq());
  for (const system of systems) await closedLoop('warm-up', WARMUP, INFLIGHT, (i) => system.single(-1 - i));
  for (let round = 0; round < ROUNDS; round++) {
    for (const system of round % 2 === 0 ? systems : [...systems].reverse()) {
      const result = await closedLoop(system.name, JOBS, INFLIGHT, (i) => system.single(i));
      rounds.set(system, [...(rounds.get(system) ?? []), result]);
      process.stderr.write(`round ${round + 1}: ${system.name} ${Math.round(result.jobsPerSecond)} jobs/s\n`);
    }
  }
  failoverMs = await failover(three);
} finally {
  // Whatever was started is stopped, even when a later part failed to start (redis-server missing).
  for (const system of systems) await system.close().catch(() => {});
  await postgres.stop();
}

const median = (list: readonly number[]): number => percentile(list, 50);
const rows = systems.map((system) => {
  const results = rounds.get(system)!;
  const latency: Summary = summarize(results.flatMap((result) => result.latencies));
  return { name: system.name, jobsPerSecond: median(results.map((result) => result.jobsPerSecond)), perRound: results.map((result) => Math.round(result.jobsPerSecond)), latency };
});
printTable(`${JOBS} tiny tensor jobs per round, ${ROUNDS} rounds in turn, ${INFLIGHT} in flight (jobs/s: median round; latency ms over every round)`,
  ['system', 'jobs/s', 'rounds', 'p50', 'p90', 'p99'],
  rows.map((row) => [row.name, row.jobsPerSecond, row.perRound.join(' / '), row.latency.p50, row.latency.p90, row.latency.p99]));
const [sqlite, pgOne, , bull] = rows as [typeof rows[number], typeof rows[number], typeof rows[number], typeof rows[number]];
const ratio = pgOne.jobsPerSecond / bull.jobsPerSecond;
process.stdout.write(`\nPostgreSQL, one orchestrator ÷ BullMQ: ${ratio.toFixed(2)}× the jobs/s, p99 ${pgOne.latency.p99.toFixed(1)} vs ${bull.latency.p99.toFixed(1)} ms `
  + `(target ≥ 1× at a lower p99: ${ratio >= 1 && pgOne.latency.p99 < bull.latency.p99 ? 'met' : 'NOT met'}); PostgreSQL ÷ SQLite: ${(pgOne.jobsPerSecond / sqlite.jobsPerSecond).toFixed(2)}×\n`);
process.stdout.write(`failover: the active orchestrator SIGKILLed; the first job submitted after it completed through another ${failoverMs} ms later (target ≤ 5000 ms)\n`);
process.stdout.write(`wrote ${writeResults('scale-out', { jobs: JOBS, rounds: ROUNDS, inflight: INFLIGHT, warmup: WARMUP, results: rows, ratio, failoverMs })}\n`);
