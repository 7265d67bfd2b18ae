import { describe, expect, it } from 'vitest';
import { MeshSeries } from '../../../src/orchestrator/metrics/series.js';
import { FakeClock } from '../../helpers/fake-clock.js';

/** The mesh view's time series (GET /v1/series), on a fake clock. */
function series(options: { windowMs?: number } = {}) {
  const clock = new FakeClock(1_000_000);
  let finished!: (model: string, outcome: string, totalMs: number) => void;
  const depths: Record<string, number> = { gen: 0 };
  const devices = [{ host: 'a', device: 'gpu0', usedMB: 100, budgetMB: 1000, temperatureC: 61 as number | null, powerW: null as number | null }];
  const ring = new MeshSeries({
    clock, queueDepths: () => depths, devices: () => devices, onJobFinished: (listener) => { finished = listener; }, ...options,
  });
  return { clock, ring, finished: (model: string, outcome: string, ms: number) => finished(model, outcome, ms), depths, devices };
}

describe('MeshSeries', () => {
  it('closes a step every 5 s, on multiples of the step: jobs per second, queue depth, p50/p99 within 10 %, memory', () => {
    const { clock, ring, finished, depths } = series();
    for (let i = 1; i <= 100; i++) finished('gen', 'succeeded', i * 10); // 10 ms … 1,000 ms
    finished('gen', 'failed', 5);
    finished('gen', 'cancelled', 5);
    depths.gen = 7;
    clock.advance(5_000);
    const view = ring.view();
    expect(view.times).toEqual([1_005]); // 1,005,000 ms: the first multiple of 5 s after 1,000,000
    expect(view.models.gen!.succeededPerSecond).toEqual([20]);
    expect(view.models.gen!.failedPerSecond).toEqual([0.2]);
    expect(view.models.gen!.queueDepth).toEqual([7]);
    const [p50] = view.models.gen!.p50Ms;
    const [p99] = view.models.gen!.p99Ms;
    expect(p50).toBeGreaterThanOrEqual(500);
    expect(p50).toBeLessThanOrEqual(550);
    expect(p99).toBeGreaterThanOrEqual(990);
    expect(p99).toBeLessThanOrEqual(1_089);
    // A GPU's temperature as its driver said it; its power, which it did not say, null.
    expect(view.devices['a/gpu0']).toEqual({ host: 'a', device: 'gpu0', budgetMB: 1000, usedMB: [100], temperatureC: [61], powerW: [null] });
  });

  it('says null where nothing was measured: no latency in a step without jobs, no memory while a host was away', () => {
    const { clock, ring, finished, devices } = series();
    clock.advance(5_000);
    finished('gen', 'succeeded', 40);
    devices.pop();
    clock.advance(5_000);
    finished('other', 'succeeded', 40);
    clock.advance(5_000);
    const view = ring.view();
    expect(view.times).toHaveLength(3);
    expect(view.models.gen!.p50Ms).toEqual([null, expect.any(Number), null]);
    expect(view.models.gen!.succeededPerSecond).toEqual([0, 0.2, 0]);
    // A model first seen in the third step: nothing before it.
    expect(view.models.other!.succeededPerSecond).toEqual([null, null, 0.2]);
    expect(view.devices['a/gpu0']!.usedMB).toEqual([100, null, null]);
  });

  it('keeps the window only, and stops on close', () => {
    const { clock, ring } = series({ windowMs: 20_000 });
    clock.advance(60_000);
    expect(ring.view().times).toHaveLength(4);
    expect(ring.view().times.at(-1)).toBe(1_060);
    ring.close();
    clock.advance(60_000);
    expect(ring.view().times.at(-1)).toBe(1_060);
  });
});
