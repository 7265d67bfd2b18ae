import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createReloader } from '../../web/reloader.js';

/**
 * The mesh view's reloader (web/reloader.js) on vitest's fake clock: however many events ask for a reload, one runs
 * at a time and two start at least the gap apart. The page itself is driven in test/browser/mesh.test.ts.
 */
beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

/** A reload that takes `ms` of fake time, recording when each started. */
function slowReload(ms: number): { starts: number[]; reload: () => Promise<void> } {
  const starts: number[] = [];
  return { starts, reload: () => new Promise((resolve) => { starts.push(Date.now()); setTimeout(resolve, ms); }) };
}

const make = (reload: () => Promise<void>, onError = vi.fn()) =>
  createReloader({ reload, onError, delayMs: 150, gapMs: 500, everyMs: 15_000, now: () => Date.now(), timers: globalThis });

describe('the mesh view\'s reloader', () => {
  it('folds a burst of a thousand requests into one reload after the delay', async () => {
    const { starts, reload } = slowReload(20);
    const reloader = make(reload);
    const t0 = Date.now();
    for (let k = 0; k < 1000; k++) reloader.request();
    await vi.advanceTimersByTimeAsync(149);
    expect(starts).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(starts).toEqual([t0 + 150]);
    await vi.advanceTimersByTimeAsync(5_000);
    expect(starts).toHaveLength(1);
  });

  it('runs one reload at a time: requests during one become exactly one more, no sooner than the gap', async () => {
    const { starts, reload } = slowReload(300);
    const reloader = make(reload);
    const t0 = Date.now();
    reloader.request(0);
    await vi.advanceTimersByTimeAsync(0);
    expect(starts).toEqual([t0]);
    // Events keep coming while it runs (and after).
    for (let ms = 10; ms < 290; ms += 10) {
      reloader.request();
      await vi.advanceTimersByTimeAsync(10);
    }
    await vi.advanceTimersByTimeAsync(2_000);
    expect(starts).toEqual([t0, t0 + 500]);
  });

  it('a steady stream of requests gets reloads every gap, not one per request', async () => {
    const { starts, reload } = slowReload(5);
    const reloader = make(reload);
    for (let ms = 0; ms < 3_000; ms += 10) {
      reloader.request(0);
      await vi.advanceTimersByTimeAsync(10);
    }
    expect(starts.length).toBeGreaterThanOrEqual(5);
    expect(starts.length).toBeLessThanOrEqual(7);
    for (let k = 1; k < starts.length; k++) expect(starts[k]! - starts[k - 1]!).toBeGreaterThanOrEqual(500);
  });

  it('an urgent request (delay 0) moves a pending one forward, within the gap', async () => {
    const { starts, reload } = slowReload(5);
    const reloader = make(reload);
    const t0 = Date.now();
    reloader.request(0);
    await vi.advanceTimersByTimeAsync(600);
    reloader.request(); // due in 150 ms
    await vi.advanceTimersByTimeAsync(50);
    reloader.request(0); // now
    await vi.advanceTimersByTimeAsync(0);
    expect(starts).toEqual([t0, t0 + 650]);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(starts).toHaveLength(2);
  });

  it('passes a failed reload to onError and keeps going; start() adds a slow reload, stop() ends everything', async () => {
    const onError = vi.fn();
    let calls = 0;
    const reloader = make(async () => {
      calls++;
      if (calls === 1) throw new Error('unreachable');
    }, onError);
    reloader.start();
    reloader.request(0);
    await vi.advanceTimersByTimeAsync(0);
    expect(onError).toHaveBeenCalledWith(new Error('unreachable'));
    await vi.advanceTimersByTimeAsync(15_000 + 150);
    expect(calls).toBe(2);
    reloader.stop();
    reloader.request(0);
    await vi.advanceTimersByTimeAsync(60_000);
    expect(calls).toBe(2);
  });
});
