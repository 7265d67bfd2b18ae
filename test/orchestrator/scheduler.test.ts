import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../src/orchestrator/clock.js';
import { policyFor, resolveConfig } from '../../src/orchestrator/config.js';
import type { RegisteredModel } from '../../src/orchestrator/registry/index.js';
import type { HostSession } from '../../src/orchestrator/routing/index.js';
import { ModelQueue, releaseDecision, Scheduler, type QueuedJob } from '../../src/orchestrator/scheduler/index.js';

const policy = { maxBatchSize: 8, preferredBatchSizes: [4], maxQueueDelayMs: 10 };

describe('releaseDecision', () => {
  it('releases at the max size, then the largest preferred size reached, then after the delay', () => {
    expect(releaseDecision(9, 0, 0, policy)).toEqual({ release: true, size: 8, reason: 'max' });
    expect(releaseDecision(5, 0, 0, policy)).toEqual({ release: true, size: 4, reason: 'preferred' });
    expect(releaseDecision(3, 100, 105, policy)).toEqual({ release: false, wakeAt: 110 });
    expect(releaseDecision(3, 100, 110, policy)).toEqual({ release: true, size: 3, reason: 'delay' });
    expect(releaseDecision(1, 0, 0, { maxBatchSize: 1, preferredBatchSizes: [], maxQueueDelayMs: 0 })).toEqual({ release: true, size: 1, reason: 'max' });
  });
});

let seq = 0;
const job = (fields: Partial<QueuedJob>): QueuedJob => ({
  id: `j${++seq}`, seq, model: 'm', priority: 2, enqueuedAt: 0, compatKey: 'a', classes: ['c'], ...fields,
});

describe('ModelQueue', () => {
  it('orders by priority, then arrival, and ages low priorities up', () => {
    const queue = new ModelQueue();
    const low = job({ priority: 3, enqueuedAt: 0 });
    const high = job({ priority: 1, enqueuedAt: 50 });
    const mid = job({ priority: 2, enqueuedAt: 10 });
    [low, high, mid].forEach((entry) => queue.push(entry));
    expect(queue.take('a', 3, 60, 1000).map((entry) => entry.id)).toEqual([high.id, mid.id, low.id]);
    // After two aging periods the level-3 job counts as level 1 and, being older, goes first.
    [low, high, mid].forEach((entry) => queue.push(entry));
    expect(queue.take('a', 1, 2000, 1000)[0]!.id).toBe(low.id);
  });

  it('keeps incompatible jobs apart and removes by id', () => {
    const queue = new ModelQueue();
    const a = job({ compatKey: '64x64' });
    const b = job({ compatKey: '256x256' });
    const c = job({ compatKey: '64x64' });
    [a, b, c].forEach((entry) => queue.push(entry));
    expect(queue.groups(0, 1000).map((group) => [group.key, group.size])).toEqual([['64x64', 2], ['256x256', 1]]);
    expect(queue.remove(c.id)?.id).toBe(c.id);
    expect(queue.remove(c.id)).toBeUndefined();
    expect(queue.take('64x64', 5, 0, 1000).map((entry) => entry.id)).toEqual([a.id]);
    expect(queue.size).toBe(1);
  });
});

describe('Scheduler (fake clock, no sleeps)', () => {
  const config = resolveConfig({}, '/tmp/unused');
  const model = (batching: typeof policy): RegisteredModel => ({
    manifest: { name: 'm', version: '1', engine: 'onnx', pipeline: 'tensor', digest: 'sha256:x', bytes: 1, memoryMB: 1, jobTypes: ['tensor'], params: {} },
    policy: { ...policyFor(config, 'm'), batching },
    pipeline: { normalize: (input) => input, compatKey: () => '' },
  });

  function harness(batching: typeof policy, slots = 1) {
    const clock = new FakeClock(0);
    const dispatched: string[][] = [];
    const host = { freeSlots: slots } as unknown as HostSession;
    const registered = model(batching);
    const scheduler = new Scheduler({
      clock, agingMs: 30_000, model: () => registered,
      pickHost: () => ((host as { freeSlots: number }).freeSlots > 0 ? host : null),
      dispatch: (_model, jobs) => {
        dispatched.push(jobs.map((entry) => entry.id));
        (host as { freeSlots: number }).freeSlots--;
      },
    });
    return { clock, dispatched, host: host as { freeSlots: number }, scheduler };
  }

  it('holds a partial batch until the oldest job has waited maxQueueDelayMs', () => {
    const { clock, dispatched, scheduler } = harness({ maxBatchSize: 8, preferredBatchSizes: [4], maxQueueDelayMs: 10 });
    scheduler.enqueue(job({ enqueuedAt: 0 }));
    scheduler.enqueue(job({ enqueuedAt: 0 }));
    scheduler.pump();
    expect(dispatched).toEqual([]);
    clock.advance(9);
    expect(dispatched).toEqual([]);
    clock.advance(1);
    expect(dispatched.map((batch) => batch.length)).toEqual([2]);
    expect(scheduler.totalDepth).toBe(0);
  });

  it('releases a preferred size at once, and batches what piled up while the replica was busy', () => {
    const { clock, dispatched, host, scheduler } = harness({ maxBatchSize: 8, preferredBatchSizes: [4], maxQueueDelayMs: 1000 });
    for (let i = 0; i < 4; i++) scheduler.enqueue(job({ enqueuedAt: 0 }));
    scheduler.pump();
    expect(dispatched.map((batch) => batch.length)).toEqual([4]);
    for (let i = 0; i < 11; i++) scheduler.enqueue(job({ enqueuedAt: 0 }));
    scheduler.pump();
    expect(dispatched).toHaveLength(1); // no free slot
    host.freeSlots = 1;
    scheduler.pump();
    expect(dispatched.map((batch) => batch.length)).toEqual([4, 8]);
    expect(scheduler.totalDepth).toBe(3);
    host.freeSlots = 1;
    clock.advance(1000);
    expect(dispatched.map((batch) => batch.length)).toEqual([4, 8, 3]);
  });
});
