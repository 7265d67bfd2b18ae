import { describe, expect, it } from 'vitest';
import { RestartBackoff } from '../../../src/agent/models/restart-backoff.js';

describe('restart backoff after engine crashes', () => {
  it('restarts at once after one crash, then doubles the pause for each crash in a row, up to the cap', () => {
    const backoff = new RestartBackoff({ initialDelayMs: 1000, maxDelayMs: 30_000, stableAfterMs: 60_000 });
    let now = 0;
    const delays: number[] = [];
    for (let i = 0; i < 8; i++) {
      now += 500; // each run dies half a second after it started
      delays.push(backoff.crashed('gen', now, 500));
    }
    expect(delays).toEqual([0, 1000, 2000, 4000, 8000, 16_000, 30_000, 30_000]);
    expect(backoff.waitMs('gen', now)).toBe(30_000);
    expect(backoff.waitMs('gen', now + 20_000)).toBe(10_000);
    expect(backoff.waitMs('gen', now + 30_000)).toBe(0);
    expect(backoff.waitMs('mlp', now)).toBe(0); // each model keeps its own streak
  });

  it('a run that stayed up a while starts a fresh streak', () => {
    const backoff = new RestartBackoff({ initialDelayMs: 1000, stableAfterMs: 60_000 });
    expect([backoff.crashed('gen', 0, 100), backoff.crashed('gen', 200, 100), backoff.crashed('gen', 2000, 100)]).toEqual([0, 1000, 2000]);
    expect(backoff.crashed('gen', 100_000, 60_000)).toBe(0);
    expect(backoff.waitMs('gen', 100_000)).toBe(0);
    expect(backoff.crashed('gen', 100_500, 400)).toBe(1000);
  });
});
