/**
 * The cost of a routing decision on the dispatch path, and what a queued job
 * costs in memory.
 *
 * Decisions: `Router.route` plus `encodeRoute` (the route log stored with the
 * batch) for meshes of 3, 50 and 1,000 hosts — three classes, the model
 * resident on a fifth of its hosts, about half the hosts busy, a few breakers
 * open — with the state moving between decisions (each decision's host takes
 * a batch, a random busy host finishes one). Side by side in one run: the
 * indexed router (the default: a scan up to 64 hosts, the registry's indexes
 * above) and the same router forced to scan every host (`scanAllUpTo:
 * Infinity`, the way every mesh was routed before the indexes). Each decision
 * is timed on its own, so p99 is a real percentile.
 *
 * Queued jobs: 100,000 jobs in the real Scheduler (each with its queue entry
 * and the job record the orchestrator keeps for every active job), heap
 * measured after a forced GC before and after; then batches released through
 * `Scheduler.next` with 1,000 hosts, timed per release (routing included).
 *
 *   node --expose-gc --import tsx bench/routing.ts [--decisions 100000] [--queued 100000]
 */
import { parseArgs } from 'node:util';
import { FakeClock } from '../test/helpers/fake-clock.js';
import { resolveConfig } from '../src/orchestrator/config/config.js';
import type { RegisteredModel } from '../src/orchestrator/registry/index.js';
import { JOB_INPUTS } from '../src/orchestrator/job-inputs/job-inputs.js';
import { BreakerBoard, encodeRoute, HealthBook, HostRegistry, HostSession, Router, ThroughputBook } from '../src/orchestrator/routing/index.js';
import { Scheduler, type QueuedJob } from '../src/orchestrator/scheduler/index.js';
import type { JobRecord } from '../src/orchestrator/store/index.js';
import { printTable, summarize, writeResults } from './lib.js';

const { values } = parseArgs({ options: { decisions: { type: 'string', default: '100000' }, queued: { type: 'string', default: '100000' } } });
const DECISIONS = Number(values.decisions);
const QUEUED = Number(values.queued);
const gc = (globalThis as { gc?: () => void }).gc;

const config = resolveConfig({}, '/tmp/unused');
const model: RegisteredModel = {
  manifest: { name: 'gen', version: '1', engine: 'onnx', digest: 'sha256:gen', bytes: 1, memoryMB: 64, jobTypes: ['image'], params: {} },
  policy: { batching: { maxBatchSize: 4, preferredBatchSizes: [4], maxQueueDelayMs: 0 }, maxQueueSize: 1_000_000, maxTimeoutMs: 600_000, retries: 2,
    replicas: { min: 0, max: null, targetInFlight: 8, idleWindowMs: 300_000 } },
  jobInputs: JOB_INPUTS.image,
};
const request = { classes: ['image', 'cloud'], hosts: null };

/** A deterministic generator, so both routers see the same mesh and the same moves. */
function seeded(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
}

function buildMesh(size: number, scanAllUpTo: number | undefined) {
  const random = seeded(size);
  const clock = new FakeClock(0);
  const hosts = new HostRegistry();
  const breakers = new BreakerBoard({ clock, policies: config.breakers });
  const throughput = new ThroughputBook();
  const router = new Router({ hosts, breakers, health: new HealthBook({ clock, heartbeatMs: 2000 }), throughput, random, replicasOnly: true, scanAllUpTo });
  const sessions: HostSession[] = [];
  let batch = 0;
  const occupy = (host: HostSession): void => {
    const id = `b${batch++}`;
    host.batches.set(id, { id, model: 'gen', jobIds: new Set([`${id}a`, `${id}b`, `${id}c`, `${id}d`]), dispatchedAt: 0 });
  };
  for (let i = 0; i < size; i++) {
    const klass = i % 20 < 12 ? 'image' : i % 20 < 17 ? 'video' : 'cloud';
    const host = new HostSession({
      id: `host-${i}`, classes: [klass], engines: ['onnx'], concurrency: 2, version: 'bench',
      devices: [{ id: 'gpu0', kind: 'gpu', name: 'bench', memoryTotalMB: 16_000, budgetMB: 14_000, usedMB: 0 }],
    }, [], `s${i}`, 0, () => {});
    hosts.set(host);
    if (i % 5 === 0 || size <= 3) host.loaded({ model: 'gen', digest: 'sha256:gen', device: 'gpu0', memoryMB: 64, lastUsedAt: 0 });
    if (random() < 0.5) occupy(host);
    throughput.sample(host.id, 'gen', { jobs: 4, cost: 4 * 256 * 256 * 6, computeMs: 200 + 400 * random() });
    sessions.push(host);
  }
  for (const index of [2, 7, 11]) {
    if (index >= size) continue;
    for (let i = 0; i < config.breakers.replica.failuresToOpen; i++) breakers.failure(`host-${index}`, 'gen', 'bench');
  }
  /** After a decision: its host takes a batch, and some busy host finishes one (the mesh stays about half busy). */
  const move = (chosen: HostSession | null): void => {
    if (chosen) occupy(chosen);
    for (let tries = 0; tries < 8; tries++) {
      const host = sessions[Math.floor(random() * sessions.length)]!;
      const first = host.batches.keys().next();
      if (!first.done) {
        host.batches.delete(first.value);
        return;
      }
    }
  };
  return { router, hosts, breakers, move };
}

const rows: (string | number)[][] = [];
const decisions = [];
for (const size of [3, 50, 1000]) {
  for (const [label, scanAllUpTo] of [['indexed', undefined], ['scan every host', Infinity]] as const) {
    if (size <= 50 && label !== 'indexed') continue; // Up to 64 hosts the indexed router scans too: the rows would be the same.
    const { router, breakers, move } = buildMesh(size, scanAllUpTo);
    for (let i = 0; i < 5_000; i++) move(router.route(model, request).host); // warm-up
    const micros: number[] = [];
    let bytes = 0;
    let placed = 0;
    for (let i = 0; i < DECISIONS; i++) {
      const start = process.hrtime.bigint();
      const decision = router.route(model, request);
      const log = encodeRoute(decision);
      micros.push(Number(process.hrtime.bigint() - start) / 1000);
      bytes += log.length;
      if (decision.host) placed++;
      move(decision.host);
    }
    const summary = summarize(micros);
    rows.push([String(size), label, summary.p50, summary.p99, summary.mean, String(Math.round(bytes / DECISIONS)), `${Math.round((100 * placed) / DECISIONS)} %`]);
    decisions.push({ hosts: size, router: label, microseconds: summary, routeLogBytes: bytes / DECISIONS, placedShare: placed / DECISIONS });
    breakers.close();
  }
}
printTable(`Routing decision + route log, ${DECISIONS.toLocaleString('en')} decisions each (µs per decision)`,
  ['hosts', 'router', 'p50', 'p99', 'mean', 'log bytes', 'placed'], rows);

// Memory per queued job: the scheduler's entry plus the job record the orchestrator keeps for each active job.
const active = new Map<string, JobRecord>();
const { router: bigRouter, move: bigMove } = buildMesh(1000, undefined);
const scheduler = new Scheduler({ model: () => model, agingMs: 5_000 });
gc?.();
const before = process.memoryUsage().heapUsed;
for (let i = 0; i < QUEUED; i++) {
  const id = `j_01a23eac${i.toString(16).padStart(20, '0')}`;
  const input = { prompt: `a lighthouse at dusk, number ${i % 1000}`, width: 256, height: 256, steps: 6, seed: i };
  const job: JobRecord = {
    seq: i, id, type: 'image', model: 'gen', status: 'queued', priority: 1 + (i % 3), album: 'default', classes: ['image', 'cloud'], hosts: null,
    input, prompt: input.prompt, grantId: 'g_0123456789abcdef', idempotencyKey: null, createdAt: 1_796_000_000_000 + i, updatedAt: 1_796_000_000_000 + i,
    finishedAt: null, deadlineAt: null, attempts: 0, batchId: null, batchSize: null, leaseHost: null, dispatchedAt: null, startedAt: null, route: null,
    attemptHost: null, computeMs: null, result: null, errorCode: null, errorMessage: null,
  };
  active.set(id, job);
  const queued: QueuedJob = {
    id, seq: i, model: 'gen', priority: job.priority, enqueuedAt: i, compatKey: `${model.jobInputs.compatKey(input)}|image,cloud|*|`,
    classes: job.classes, hosts: null, avoid: [], input,
  };
  scheduler.enqueue(queued);
}
gc?.();
const perJob = (process.memoryUsage().heapUsed - before) / QUEUED;

// Releases from the full queue through the 1,000-host router: what one pump step costs with 100,000 jobs waiting.
const releaseMicros: number[] = [];
let now = QUEUED;
for (let i = 0; i < 20_000; i++) {
  const start = process.hrtime.bigint();
  const next = scheduler.next(now, (candidate) => bigRouter.route(candidate, request).host);
  releaseMicros.push(Number(process.hrtime.bigint() - start) / 1000);
  if ('release' in next) bigMove(next.release.host);
  else bigMove(null);
  now += 1;
}
const release = summarize(releaseMicros);
printTable(`${QUEUED.toLocaleString('en')} queued jobs, 1,000 hosts`, ['measure', 'value'], [
  ['heap per queued job (queue entry + job record)', gc ? `${Math.round(perJob)} B` : 'run with --expose-gc'],
  ['Scheduler.next with routing, p50', `${release.p50.toFixed(2)} µs`],
  ['Scheduler.next with routing, p99', `${release.p99.toFixed(2)} µs`],
]);
process.stdout.write(`\nwrote ${writeResults('routing', { decisions, queued: { jobs: QUEUED, bytesPerJob: gc ? perJob : null, schedulerNextMicroseconds: release }, activeRecords: active.size })}\n`);
