/**
 * The cost of a routing decision on the dispatch path: `Router.route` (every
 * host checked and given a reason, the choice by residency and load per
 * measured throughput) plus `encodeRoute` (the route log string stored with
 * the batch), for meshes of 3, 10 and 50 hosts with a third of them of
 * another class, some busy and one with an open breaker. In-process, no I/O.
 *
 *   node --import tsx bench/routing.ts [--decisions 200000]
 */
import { parseArgs } from 'node:util';
import { FakeClock } from '../src/orchestrator/clock.js';
import { resolveConfig } from '../src/orchestrator/config.js';
import type { RegisteredModel } from '../src/orchestrator/registry/index.js';
import { PIPELINES } from '../src/orchestrator/registry/index.js';
import { BreakerBoard, encodeRoute, HealthBook, HostRegistry, HostSession, Router, ThroughputBook } from '../src/orchestrator/routing/index.js';
import { printTable, writeResults } from './lib.js';

const { values } = parseArgs({ options: { decisions: { type: 'string', default: '200000' } } });
const DECISIONS = Number(values.decisions);

const config = resolveConfig({}, '/tmp/unused');
const model: RegisteredModel = {
  manifest: { name: 'gen', version: '1', engine: 'onnx', digest: 'sha256:gen', bytes: 1, memoryMB: 64, jobTypes: ['image'], params: {} },
  policy: { batching: { maxBatchSize: 4, preferredBatchSizes: [4], maxQueueDelayMs: 0 }, maxQueueSize: 1000, maxTimeoutMs: 600_000, retries: 2,
    replicas: { min: 0, max: null, targetInFlight: 8, idleWindowMs: 300_000 } },
  pipeline: PIPELINES.image,
};

const rows: (string | number)[][] = [];
const results = [];
for (const size of [3, 10, 50]) {
  const clock = new FakeClock(0);
  const hosts = new HostRegistry();
  const breakers = new BreakerBoard({ clock, policies: config.breakers });
  const throughput = new ThroughputBook();
  const router = new Router({ hosts, breakers, health: new HealthBook({ clock, heartbeatMs: 2000 }), throughput });
  for (let i = 0; i < size; i++) {
    const host = new HostSession({
      id: `host-${i}`, classes: [i % 3 === 0 ? 'video' : 'image'], engines: ['onnx'], concurrency: 2, version: 'bench',
      devices: [{ id: 'gpu0', kind: 'gpu', name: 'bench', memoryTotalMB: 16_000, budgetMB: 14_000, usedMB: 0 }],
    }, [], `s${i}`, 0, () => {});
    host.loaded({ model: 'gen', digest: 'sha256:gen', device: 'gpu0', memoryMB: 64, lastUsedAt: 0 });
    if (i % 4 === 1) host.batches.set('b', { id: 'b', model: 'gen', jobIds: new Set(['a', 'b', 'c', 'd']), dispatchedAt: 0 });
    throughput.sample(host.id, 'gen', { jobs: 4, cost: 4 * 256 * 256 * 6, computeMs: 200 + 40 * i });
    hosts.set(host);
  }
  for (let i = 0; i < config.breakers.replica.failuresToOpen; i++) breakers.failure('host-2', 'gen', 'bench');
  const request = { classes: ['image', 'cloud'], hosts: null };
  for (let i = 0; i < 10_000; i++) encodeRoute(router.route(model, request)); // warm-up
  let bytes = 0;
  const start = performance.now();
  for (let i = 0; i < DECISIONS; i++) bytes += encodeRoute(router.route(model, request)).length;
  const microseconds = ((performance.now() - start) * 1000) / DECISIONS;
  const logBytes = Math.round(bytes / DECISIONS);
  rows.push([String(size), microseconds, String(logBytes)]);
  results.push({ hosts: size, microsecondsPerDecision: microseconds, routeLogBytes: logBytes });
  breakers.close();
}
printTable(`Routing decision + route log, ${DECISIONS} decisions each`, ['hosts', 'µs per decision', 'route log bytes'], rows);
process.stdout.write(`\nwrote ${writeResults('routing', results)}\n`);
