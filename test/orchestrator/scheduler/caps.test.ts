import { describe, expect, it } from 'vitest';
import { capsOf, parseCaveat, narrowGrant, GrantAuthority, type Caveat } from '../../../src/orchestrator/auth/index.js';
import { LineageCaps } from '../../../src/orchestrator/scheduler/index.js';
import { meshErrorOf } from '../../helpers/errors.js';
import { FakeClock } from '../../helpers/fake-clock.js';

const DAY = 86_400_000;
const caps = (...lines: string[]) => capsOf(lines.map((line) => parseCaveat(line) as Caveat));
const refusal = meshErrorOf;

describe('LineageCaps', () => {
  it('refuses a job past max-queued with what is queued, what is left and the drain estimate', () => {
    const queued = new Map([['A', 3]]);
    const lineage = new LineageCaps({ clock: new FakeClock(10 * DAY), queuedOf: (id) => queued.get(id) ?? 0 });
    const cap = caps('max-queued 5');
    lineage.check('A', cap, 2, () => 1);
    const error = refusal(() => lineage.check('A', cap, 3, (excess) => excess * 7));
    expect(error.code).toBe('QUEUED_CAP_REACHED');
    expect(error.status).toBe(429);
    expect(error.headers['retry-after']).toBe('7');
    expect(error.details).toEqual({ cap: 'max-queued', limit: 5, used: 3, left: 2, retryAfter: 7 });
    expect(error.message).toContain('caveat "max-queued 5"');
    // Another lineage's queue is its own.
    lineage.check('B', cap, 5, () => 1);
  });

  it('counts device time per UTC day from succeeded jobs, refuses at the cap until midnight UTC, then refills', () => {
    const clock = new FakeClock(10 * DAY + 3_600_000);
    const lineage = new LineageCaps({ clock, queuedOf: () => 0 });
    const cap = caps('device-seconds-per-day 60');
    lineage.restore(lineage.dayStart(), new Map([['A', 45_000]]));
    lineage.charge('A', 14_000);
    lineage.check('A', cap, 1, () => 1);
    expect(lineage.usage('A', cap).deviceSecondsPerDay).toEqual({ limit: 60, used: 59, left: 1, refillsAt: new Date(11 * DAY).toISOString() });
    lineage.charge('A', 1_500);
    const error = refusal(() => lineage.check('A', cap, 1, () => 1));
    expect(error.code).toBe('DEVICE_TIME_CAP_REACHED');
    expect(error.details).toMatchObject({ cap: 'device-seconds-per-day', limit: 60, used: 60.5, left: 0, refillsAt: new Date(11 * DAY).toISOString() });
    expect(error.headers['retry-after']).toBe(String(23 * 3600));
    clock.advance(23 * 3_600_000);
    lineage.check('A', cap, 1, () => 1);
    expect(lineage.usage('A', cap).deviceSecondsPerDay?.used).toBe(0);
  });

  it('ignores use read back from another day', () => {
    const lineage = new LineageCaps({ clock: new FakeClock(10 * DAY), queuedOf: () => 0 });
    lineage.restore(9 * DAY, new Map([['A', 999_000]]));
    expect(lineage.usage('A', caps('device-seconds-per-day 1')).deviceSecondsPerDay?.used).toBe(0);
  });
});

describe('caps on grants', () => {
  const authority = new GrantAuthority(new Uint8Array(32).fill(7), 'http://test');

  it('a narrowing may lower a cap and the tightest holds; one that would raise or repeat it is refused', () => {
    const { token } = authority.mint('client', ['max-queued 10', 'device-seconds-per-day 600']);
    const lower = narrowGrant(token, ['max-queued 2']);
    expect(authority.verify(lower, 0).caps).toEqual({
      maxQueued: { limit: 2, caveat: 'max-queued 2' }, deviceSecondsPerDay: { limit: 600, caveat: 'device-seconds-per-day 600' },
    });
    expect(() => narrowGrant(token, ['max-queued 11'])).toThrow(/does not tighten "max-queued 10"/);
    expect(() => narrowGrant(token, ['device-seconds-per-day 600'])).toThrow(/may only lower a cap/);
    expect(() => authority.mint('agent', ['host h', 'max-queued 1'])).toThrow(/"max-queued 1" would restrict nothing on an? agent grant/);
  });

  it('a cap is a whole number', () => {
    expect(parseCaveat('max-queued 1.5')).toMatch(/whole number/);
    expect(parseCaveat('device-seconds-per-day -1')).toMatch(/whole number/);
    expect(parseCaveat('max-queued 0')).toEqual({ condition: 'max-queued', limit: 0 });
  });
});
