import { describe, expect, it } from 'vitest';
import { meshErrorOf } from '../../helpers/errors.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { Admission } from '../../../src/orchestrator/scheduler/index.js';


describe('admission (fake clock, no sleeps)', () => {
  it('refuses a full queue with 429 and a Retry-After computed from the recent drain rate', () => {
    const clock = new FakeClock(0);
    const admission = new Admission(clock);
    expect(() => admission.checkBounds('gen', 9, 10, 9, 100)).not.toThrow();
    // Nothing has drained yet: a conservative default.
    expect(meshErrorOf(() => admission.checkBounds('gen', 10, 10, 10, 100)).headers['retry-after']).toBe('5');
    // 20 jobs left the queue over 10 s: 2 jobs/s, so 7 jobs over the bound clear in 4 s.
    for (let second = 0; second < 10; second++) {
      admission.recordDrain('gen', 2);
      clock.advance(1000);
    }
    const full = meshErrorOf(() => admission.checkBounds('gen', 16, 10, 16, 100));
    expect(full.code).toBe('QUEUE_FULL');
    expect(full.status).toBe(429);
    expect(full.headers['retry-after']).toBe('4');
    expect(full.message).toContain('"gen"');
    expect(full.message).toContain('16 of 10');
    expect(meshErrorOf(() => admission.checkBounds('gen', 1, 10, 100, 100)).code).toBe('MESH_FULL');
    // The drain window forgets old history.
    clock.advance(60_000);
    expect(admission.drainRate('gen')).toBe(0);
  });
});
