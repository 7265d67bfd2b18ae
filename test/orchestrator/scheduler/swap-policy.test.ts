import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../helpers/fake-clock.js';
import { policyFor, resolveConfig } from '../../../src/orchestrator/config/config.js';
import type { RegisteredModel } from '../../../src/orchestrator/registry/index.js';
import { HostSession } from '../../../src/orchestrator/routing/index.js';
import { displacedBy, Scheduler, SwapPolicy, type QueuedJob, type SwapPolicyName } from '../../../src/orchestrator/scheduler/index.js';

/**
 * The swap policy on the scheduler, driven by a fake clock: one host whose device fits one of two models, and a
 * simulated agent that swaps (evicts the resident model, loads the other) in SWAP_MS and runs a batch in RUN_MS.
 * The device is simulated (no GPU here); the scheduler, the policy and the host session are the real ones.
 */
const SWAP_MS = 500;
const RUN_MS = 50;
const BUDGET_MB = 1000;
const config = resolveConfig({}, '/tmp/unused');
const batching = { maxBatchSize: 4, preferredBatchSizes: [], maxQueueDelayMs: 0 };

const model = (name: string, memoryMB = 600): RegisteredModel => ({
  manifest: { name, version: '1', engine: 'onnx', digest: `sha256:${name}`, bytes: 1, memoryMB, jobTypes: ['image'], params: {} },
  policy: { ...policyFor(config, name), batching },
  jobInputs: { normalize: (input) => input, compatKey: () => '', probeInput: () => ({}), cost: () => 1 },
});

function newHost(now: number, budgetMB = BUDGET_MB): HostSession {
  const device = { id: 'gpu0', kind: 'gpu' as const, name: 'sim', memoryTotalMB: budgetMB, budgetMB, usedMB: 0 };
  return new HostSession({ id: 'h1', classes: ['image'], devices: [device], engines: ['onnx'], concurrency: 1, version: 'test' }, [], 's1', now, () => {});
}

let seq = 0;
const queued = (name: string, enqueuedAt: number, priority = 2): QueuedJob => ({
  id: `j${++seq}`, seq, model: name, priority, enqueuedAt, compatKey: 'a', classes: ['image'],
});

/** A dispatcher and an agent in miniature: batches leave when the host's one slot is free; records what ran when. */
function mesh(policy: SwapPolicyName, maxSwapHoldMs = 10_000, models = [model('a'), model('b')]) {
  const clock = new FakeClock(0);
  const host = newHost(clock.now());
  const swaps = new SwapPolicy({ policy, maxSwapHoldMs });
  const byName = new Map(models.map((entry) => [entry.manifest.name, entry]));
  const scheduler = new Scheduler({ agingMs: 3_600_000, model: (name) => byName.get(name), swaps });
  const ran: { model: string; jobs: string[]; at: number; swapped: boolean }[] = [];
  let wake: { cancel(): void } | null = null;
  const pump = (): void => {
    wake?.cancel();
    wake = null;
    for (;;) {
      const next = scheduler.next(clock.now(), () => (host.freeSlots > 0 ? host : null));
      if ('wakeAt' in next) {
        if (next.wakeAt !== Infinity) wake = clock.setTimer(next.wakeAt - clock.now(), pump);
        return;
      }
      const { model: released, jobs } = next.release;
      const name = released.manifest.name;
      const swapped = !host.isResident(name);
      host.batches.set(`b${ran.length}`, { id: `b${ran.length}`, model: name, jobIds: new Set(jobs.map((job) => job.id)), dispatchedAt: clock.now() });
      ran.push({ model: name, jobs: jobs.map((job) => job.id), at: clock.now(), swapped });
      const batchId = `b${ran.length - 1}`;
      if (swapped) for (const other of displacedBy(released, host)) host.unloaded(other);
      clock.setTimer((swapped ? SWAP_MS : 0) + RUN_MS, () => {
        if (swapped) host.loaded({ model: name, digest: released.manifest.digest, device: 'gpu0', memoryMB: released.manifest.memoryMB, lastUsedAt: clock.now() });
        host.batches.delete(batchId);
        pump();
      });
    }
  };
  /** Queue jobs as a dispatcher would (one pump after them all). */
  const enqueue = (...jobs: QueuedJob[]): void => {
    for (const job of jobs) scheduler.enqueue(job);
    pump();
  };
  return { clock, host, scheduler, swaps, ran, enqueue, pump };
}

/** 40 jobs, a and b alternating, all queued at once; runs until every one has run. */
function alternating(policy: SwapPolicyName) {
  const run = mesh(policy);
  run.enqueue(...Array.from({ length: 40 }, (_, i) => queued(i % 2 === 0 ? 'a' : 'b', 0)));
  run.clock.advance(60_000);
  return run;
}

describe('swap policy: two models that cannot both fit on one device', () => {
  it('knows when a load would swap a model out: no room beside it on any device', () => {
    const host = newHost(0);
    expect(displacedBy(model('a'), host)).toEqual([]); // nothing resident
    host.loaded({ model: 'a', digest: 'sha256:a', device: 'gpu0', memoryMB: 600, lastUsedAt: 0 });
    expect(displacedBy(model('a'), host)).toEqual([]); // it is the resident one
    expect(displacedBy(model('b'), host)).toEqual(['a']);
    expect(displacedBy(model('small', 300), host)).toEqual([]); // fits beside it
    // A model being loaded there (a replica asked for, not reported yet) takes room too.
    const loading = newHost(0);
    loading.replicaChanges.set('a', { change: 'load', at: 0 });
    expect(displacedBy(model('b'), loading, () => 600)).toEqual(['a']);
    expect(displacedBy(model('b'), loading)).toEqual([]); // its memory unknown: counted as none
  });

  it('lru swaps on every batch; batch-before-swap drains one model, swaps once, and runs every job', () => {
    const lru = alternating('lru');
    const held = alternating('batch-before-swap');
    for (const run of [lru, held]) expect(run.ran.flatMap((batch) => batch.jobs)).toHaveLength(40);
    expect(lru.ran.map((batch) => batch.model).join('')).toBe('ab'.repeat(5));
    expect(lru.ran.filter((batch) => batch.swapped)).toHaveLength(10);
    expect(held.ran.map((batch) => batch.model).join('')).toBe('aaaaabbbbb');
    expect(held.ran.filter((batch) => batch.swapped)).toHaveLength(2); // the first load, then one swap
    // Fewer swaps, so everything is done sooner: 10 × (500 + 50) ms against 2 × (500 + 50) + 8 × 50 ms.
    const finished = (run: typeof lru): number => run.ran.at(-1)!.at + (run.ran.at(-1)!.swapped ? SWAP_MS : 0) + RUN_MS;
    expect(finished(lru)).toBe(10 * (SWAP_MS + RUN_MS));
    expect(finished(held)).toBe(2 * (SWAP_MS + RUN_MS) + 8 * RUN_MS);
  });

  it('bounds the hold: a model kept busy forever is swapped out after maxSwapHoldMs, so the other is not starved', () => {
    const HOLD_MS = 1000;
    const run = mesh('batch-before-swap', HOLD_MS);
    run.enqueue(queued('a', 0));
    run.clock.advance(SWAP_MS + RUN_MS); // a is resident now
    // a stream of a's jobs that never lets a's queue run dry, and one b job waiting behind it
    const feeder = (): void => {
      run.enqueue(queued('a', run.clock.now()), queued('a', run.clock.now()));
      if (run.clock.now() < 20_000) run.clock.setTimer(RUN_MS / 2, feeder);
    };
    feeder();
    const waitingSince = run.clock.now();
    const b = queued('b', waitingSince);
    run.enqueue(b);
    // While the hold lasts, explain can say why b waits and until when.
    run.clock.advance(2 * RUN_MS);
    const hold = run.scheduler.swapHold('b', b.id, run.host, run.clock.now());
    expect(hold).toMatchObject({ host: 'h1', keeping: ['a'], waiting: 'b' });
    expect(hold!.until - hold!.since).toBe(HOLD_MS);
    run.clock.advance(30_000);
    const bRan = run.ran.find((batch) => batch.jobs.includes(b.id))!;
    expect(bRan.swapped).toBe(true);
    // The bound: the hold, plus the batch running when it ended.
    expect(bRan.at - waitingSince).toBeLessThanOrEqual(HOLD_MS + RUN_MS);
    expect(bRan.at - waitingSince).toBeGreaterThanOrEqual(HOLD_MS - RUN_MS);
    // And a gets the device back the same way, with a fresh hold.
    expect(run.ran.filter((batch) => batch.swapped).length).toBeGreaterThanOrEqual(3);
  });

  it('does not hold a batch of a better priority level than everything ready for the resident model', () => {
    const run = mesh('batch-before-swap');
    run.enqueue(queued('a', 0));
    run.clock.advance(SWAP_MS + RUN_MS);
    const urgent = queued('b', run.clock.now(), 1);
    run.enqueue(...Array.from({ length: 8 }, () => queued('a', run.clock.now(), 2)), urgent);
    expect(run.scheduler.swapHold('b', urgent.id, run.host, run.clock.now())).toBeNull();
    run.clock.advance(10_000);
    // The urgent b takes the free device at once, ahead of a's eight jobs (which then swap back: two batches).
    expect(run.ran.map((batch) => batch.model).join('')).toBe('abaa');
    expect(run.ran[1]).toMatchObject({ model: 'b', swapped: true, at: SWAP_MS + RUN_MS });
  });

  it('does not hold when the resident model has nothing ready (an idle device is not kept waiting)', () => {
    const run = mesh('batch-before-swap');
    run.enqueue(queued('a', 0));
    run.clock.advance(SWAP_MS + RUN_MS);
    const b = queued('b', run.clock.now());
    run.enqueue(b);
    expect(run.ran.at(-1)).toMatchObject({ model: 'b', swapped: true, at: SWAP_MS + RUN_MS });
  });

  it('tells the autoscaler not to place a replica that would evict a model with work; lru never does', () => {
    const host = newHost(0);
    host.loaded({ model: 'a', digest: 'sha256:a', device: 'gpu0', memoryMB: 600, lastUsedAt: 0 });
    const held = new SwapPolicy({ policy: 'batch-before-swap', maxSwapHoldMs: 1000 });
    const lru = new SwapPolicy({ policy: 'lru', maxSwapHoldMs: 1000 });
    expect(held.displacesWork(model('b'), host, (name) => name === 'a')).toBe(true);
    expect(held.displacesWork(model('b'), host, () => false)).toBe(false);
    expect(lru.displacesWork(model('b'), host, () => true)).toBe(false);
  });
});
