import { describe, expect, it } from 'vitest';
import { policyFor, resolveConfig } from '../../../src/orchestrator/config/config.js';
import type { RegisteredModel } from '../../../src/orchestrator/registry/index.js';
import type { HostSession } from '../../../src/orchestrator/routing/index.js';
import { ArrivalRate, ModelQueue, releaseDecision, Scheduler, worthWaiting, type QueuedJob } from '../../../src/orchestrator/scheduler/index.js';

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

describe('Scheduler.next', () => {
  const config = resolveConfig({}, '/tmp/unused');
  const model = (batching: typeof policy): RegisteredModel => ({
    manifest: { name: 'm', version: '1', engine: 'onnx', digest: 'sha256:x', bytes: 1, memoryMB: 1, jobTypes: ['tensor'], params: {} },
    policy: { ...policyFor(config, 'm'), batching },
    jobInputs: { normalize: (input) => input, compatKey: () => '', probeInput: () => ({}), cost: () => 1 },
  });

  function harness(batching: typeof policy, hold: 'while-arriving' | 'always' = 'always') {
    const registered = model(batching);
    const host = { freeSlots: 1, computing: 0 };
    const scheduler = new Scheduler({ agingMs: 30_000, model: () => registered, holdPartialBatches: hold });
    const pickHost = () => (host.freeSlots > 0 ? (host as unknown as HostSession) : null);
    /** What a dispatcher would do at `now`: take every batch it can; returns the sizes and when to look again. */
    const drain = (now: number): { sizes: number[]; wakeAt: number } => {
      const sizes: number[] = [];
      for (;;) {
        const next = scheduler.next(now, pickHost);
        if ('wakeAt' in next) return { sizes, wakeAt: next.wakeAt };
        sizes.push(next.release.jobs.length);
        host.freeSlots--;
      }
    };
    return { host, scheduler, drain };
  }

  it('holds a partial batch until the oldest job has waited maxQueueDelayMs, and says when to look again', () => {
    const { scheduler, drain } = harness({ maxBatchSize: 8, preferredBatchSizes: [4], maxQueueDelayMs: 10 });
    scheduler.enqueue(job({ enqueuedAt: 0 }));
    scheduler.enqueue(job({ enqueuedAt: 0 }));
    expect(drain(0)).toEqual({ sizes: [], wakeAt: 10 });
    expect(drain(9)).toEqual({ sizes: [], wakeAt: 10 });
    expect(drain(10)).toEqual({ sizes: [2], wakeAt: Infinity });
    expect(scheduler.totalDepth).toBe(0);
  });

  it('releases a preferred size at once, and batches what piled up while the replica was busy', () => {
    const { host, scheduler, drain } = harness({ maxBatchSize: 8, preferredBatchSizes: [4], maxQueueDelayMs: 1000 });
    for (let i = 0; i < 4; i++) scheduler.enqueue(job({ enqueuedAt: 0 }));
    expect(drain(0).sizes).toEqual([4]);
    for (let i = 0; i < 11; i++) scheduler.enqueue(job({ enqueuedAt: 0 }));
    expect(drain(0).sizes).toEqual([]); // no free slot
    host.freeSlots = 1;
    expect(drain(0).sizes).toEqual([8]);
    expect(scheduler.totalDepth).toBe(3);
    host.freeSlots = 1;
    expect(drain(999)).toEqual({ sizes: [], wakeAt: 1000 });
    expect(drain(1000).sizes).toEqual([3]);
  });

  it('releases the best job first across models and removes jobs by id', () => {
    const { scheduler, drain } = harness({ maxBatchSize: 1, preferredBatchSizes: [], maxQueueDelayMs: 0 });
    const low = job({ priority: 3 });
    const high = job({ priority: 1 });
    scheduler.enqueue(low);
    scheduler.enqueue(high);
    const first = scheduler.next(0, () => ({ computing: 0 }) as HostSession);
    expect('release' in first && first.release.jobs[0]!.id).toBe(high.id);
    expect(scheduler.remove('m', low.id)).toBe(true);
    expect(scheduler.remove('m', low.id)).toBe(false);
    expect(drain(0).sizes).toEqual([]);
    expect(scheduler.depths()).toEqual({ m: 0 });
  });
});

describe('work-conserving batching', () => {
  const batching = { maxBatchSize: 32, preferredBatchSizes: [8, 16, 32], maxQueueDelayMs: 10 };

  it('waits only when the arrivals expected within the delay reach the next batch size worth having', () => {
    expect(worthWaiting(1, batching, 0)).toBe(false);
    expect(worthWaiting(1, batching, 6.9)).toBe(false);
    expect(worthWaiting(1, batching, 7)).toBe(true);
    expect(worthWaiting(9, batching, 7)).toBe(true); // 16 is next
    expect(worthWaiting(9, batching, 6)).toBe(false);
  });

  it('estimates arrivals from the recent gaps, and stops trusting them once the silence is longer', () => {
    const rate = new ArrivalRate();
    expect(rate.expectedWithin(10, 0)).toBe(0);
    rate.arrived(0);
    expect(rate.expectedWithin(10, 0)).toBe(0); // one arrival is not a stream
    for (let at = 1; at <= 20; at++) rate.arrived(at);
    expect(rate.expectedWithin(10, 20)).toBeCloseTo(10, 0);
    expect(rate.expectedWithin(10, 120)).toBeCloseTo(0.1, 2); // 100 ms of silence: the burst is over
  });

  const config = resolveConfig({}, '/tmp/unused');
  const registered: RegisteredModel = {
    manifest: { name: 'm', version: '1', engine: 'onnx', digest: 'sha256:x', bytes: 1, memoryMB: 1, jobTypes: ['tensor'], params: {} },
    policy: { ...policyFor(config, 'm'), batching },
    jobInputs: { normalize: (input) => input, compatKey: () => '', probeInput: () => ({}), cost: () => 1 },
  };
  const idle = { freeSlots: 1, computing: 0 } as unknown as HostSession;

  it('sends a lone job to an idle replica at once instead of waiting out the delay; the old rule waits', () => {
    for (const [hold, expected] of [['while-arriving', 1], ['always', 0]] as const) {
      const scheduler = new Scheduler({ agingMs: 30_000, model: () => registered, holdPartialBatches: hold });
      scheduler.enqueue(job({ enqueuedAt: 0 }));
      const next = scheduler.next(0, () => idle);
      expect('release' in next ? next.release.jobs.length : 0).toBe(expected);
    }
  });

  it('holds a partial batch while jobs are streaming in fast enough to fill it, and never lets one out early to a busy replica', () => {
    const scheduler = new Scheduler({ agingMs: 30_000, model: () => registered, holdPartialBatches: 'while-arriving' });
    for (let at = 0; at < 5; at++) scheduler.enqueue(job({ enqueuedAt: at * 0.2 }));
    expect('wakeAt' in scheduler.next(1, () => idle)).toBe(true); // 5 queued, one every 0.2 ms: 8 is near
    const busy = { freeSlots: 1, computing: 1 } as unknown as HostSession;
    const slow = new Scheduler({ agingMs: 30_000, model: () => registered, holdPartialBatches: 'while-arriving' });
    slow.enqueue(job({ enqueuedAt: 0 }));
    expect('wakeAt' in slow.next(0, () => busy)).toBe(true);
  });
});
