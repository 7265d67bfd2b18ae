import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { meshErrorOf } from '../../helpers/errors.js';
import { GrantAuthority, narrowGrant, parseCaveat, formatCaveat, type VerifiedGrant } from '../../../src/orchestrator/auth/index.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { Admission, GrantRateLimiter } from '../../../src/orchestrator/scheduler/index.js';

const authority = new GrantAuthority(randomBytes(32), 'http://test');

/** A grant as the orchestrator sees it after verifying the token. */
const verified = (token: string, clock: FakeClock): VerifiedGrant => authority.verify(token, clock.now());

/** Admit `n` jobs for a grant now; returns how many got in. */
function admit(limiter: GrantRateLimiter, grant: VerifiedGrant, n: number): number {
  let admitted = 0;
  for (let i = 0; i < n; i++) {
    try {
      limiter.take(grant.rates);
      admitted++;
    } catch {
      // refused
    }
  }
  return admitted;
}

/** A limiter on a fake clock at 0, and a grant that carries one rate caveat. */
function limiterFor(caveat: string) {
  const clock = new FakeClock(0);
  return { clock, limiter: new GrantRateLimiter(clock), grant: verified(authority.mint('client', [caveat]).token, clock) };
}

describe('rate caveats (fake clock, no sleeps)', () => {
  it('are stored as a count and a window in their own unit, and written back as they were', () => {
    for (const [text, count, windowMs] of [['rate 1/h', 1, 3_600_000], ['rate 2/m', 2, 60_000], ['rate 10/s', 10, 1000]] as const) {
      const caveat = parseCaveat(text);
      expect(caveat).toEqual({ condition: 'rate', count, unit: text.at(-1), windowMs });
      expect(formatCaveat(caveat as Exclude<typeof caveat, string>)).toBe(text);
    }
    expect(parseCaveat('rate 0/m')).toMatch(/1 to 100000 jobs/);
    expect(parseCaveat('rate 5/d')).toMatch(/N\/s, N\/m or N\/h/);
  });

  it('rate 1/h allows one job in any sliding hour, not one a minute (finding 3)', () => {
    const { clock, limiter, grant } = limiterFor('rate 1/h');
    limiter.take(grant.rates);
    clock.advance(61_000);
    const limited = meshErrorOf(() => limiter.take(grant.rates));
    expect(limited.code).toBe('RATE_LIMITED');
    expect(limited.status).toBe(429);
    expect(limited.message).toContain('1 job per hour');
    expect(limited.message).toContain('rate 1/h');
    // Retry-After counts down to when the first job leaves the hour: 3600 - 61 s.
    expect(limited.headers['retry-after']).toBe('3539');
    clock.advance(3_539_000 - 1);
    expect(() => limiter.take(grant.rates)).toThrow(/retry after 1s/);
    clock.advance(1);
    expect(() => limiter.take(grant.rates)).not.toThrow();
  });

  it('N/s and N/m windows slide: Retry-After is when the oldest job in the window leaves it', () => {
    const clock = new FakeClock(0);
    const limiter = new GrantRateLimiter(clock);
    const perMinute = verified(authority.mint('client', ['rate 2/m']).token, clock);
    limiter.take(perMinute.rates);
    clock.advance(20_000);
    limiter.take(perMinute.rates);
    expect(meshErrorOf(() => limiter.take(perMinute.rates)).headers['retry-after']).toBe('40');
    clock.advance(40_000);
    expect(() => limiter.take(perMinute.rates)).not.toThrow();
    expect(meshErrorOf(() => limiter.take(perMinute.rates)).headers['retry-after']).toBe('20');

    const perSecond = verified(authority.mint('client', ['rate 3/s']).token, clock);
    expect(admit(limiter, perSecond, 5)).toBe(3);
    expect(meshErrorOf(() => limiter.take(perSecond.rates)).headers['retry-after']).toBe('1');
    clock.advance(1000);
    expect(admit(limiter, perSecond, 5)).toBe(3);
  });

  it('every offline narrowing shares its parent\'s allowance: a new expiry is not a new allowance (finding 3)', () => {
    const clock = new FakeClock(Date.parse('2026-12-02T10:00:00Z'));
    const limiter = new GrantRateLimiter(clock);
    const parent = authority.mint('client', ['rate 2/m']).token;
    expect(admit(limiter, verified(parent, clock), 2)).toBe(2);
    for (const minutes of [5, 10, 15]) {
      const narrowed = narrowGrant(parent, [`time-before ${new Date(clock.now() + minutes * 60_000).toISOString()}`]);
      const grant = verified(narrowed, clock);
      expect(grant.id).toBe(verified(parent, clock).id);
      expect(meshErrorOf(() => limiter.take(grant.rates)).code).toBe('RATE_LIMITED');
    }
    // Another grant has its own allowance.
    expect(admit(limiter, verified(authority.mint('client', ['rate 2/m']).token, clock), 2)).toBe(2);
  });

  it('a narrowing with a stricter rate is held to it, and all narrowings together to the parent\'s', () => {
    const clock = new FakeClock(0);
    const limiter = new GrantRateLimiter(clock);
    const parent = authority.mint('client', ['rate 5/m']).token;
    const strictA = verified(narrowGrant(parent, ['types image', 'rate 1/m']), clock);
    const strictB = verified(narrowGrant(parent, ['types tensor', 'rate 1/m']), clock);
    const loose = verified(narrowGrant(parent, ['rate 100/m']), clock);
    expect(admit(limiter, strictA, 3)).toBe(1); // its own 1/m
    expect(admit(limiter, strictB, 3)).toBe(1); // a sibling's own 1/m, not A's
    expect(admit(limiter, loose, 10)).toBe(3); // 100/m of its own, but only 5/m shared with the parent
    expect(admit(limiter, verified(parent, clock), 1)).toBe(0);
    // A refused job counts against none of the limiters: when the shared window frees up, A still gets its one.
    clock.advance(60_000);
    expect(admit(limiter, strictA, 3)).toBe(1);
    expect(admit(limiter, verified(parent, clock), 10)).toBe(4);
  });

  it('the strictest rate along the chain decides, and Retry-After is the longest wait among the full ones', () => {
    const clock = new FakeClock(0);
    const limiter = new GrantRateLimiter(clock);
    const grant = verified(narrowGrant(authority.mint('client', ['rate 10/m']).token, ['rate 1/h']), clock);
    limiter.take(grant.rates);
    const limited = meshErrorOf(() => limiter.take(grant.rates));
    expect(limited.message).toContain('rate 1/h');
    expect(limited.headers['retry-after']).toBe('3600');
  });

  it('Admission.takeRate is the grant\'s limiter; a grant without rate caveats is not limited', () => {
    const clock = new FakeClock(0);
    const admission = new Admission(clock);
    const unlimited = verified(authority.mint('client').token, clock);
    for (let i = 0; i < 1000; i++) admission.takeRate(unlimited.rates);
    const limited = verified(authority.mint('client', ['rate 1/s']).token, clock);
    admission.takeRate(limited.rates);
    expect(meshErrorOf(() => admission.takeRate(limited.rates)).code).toBe('RATE_LIMITED');
  });

  it('check(rates, n) says whether n more jobs fit, taking nothing: a request of several jobs refused whole (Retry-After for when they fit)', () => {
    const { clock, limiter, grant } = limiterFor('rate 3/m');
    limiter.take(grant.rates);
    clock.advance(10_000);
    expect(() => limiter.check(grant.rates, 2)).not.toThrow();
    const three = meshErrorOf(() => limiter.check(grant.rates, 3));
    expect(three.code).toBe('RATE_LIMITED');
    // One of the three must leave first: the job taken at 0 leaves the minute at 60 s.
    expect(three.headers['retry-after']).toBe('50');
    // More than the rate allows at all never fits: a whole window is the hint.
    expect(meshErrorOf(() => limiter.check(grant.rates, 4)).headers['retry-after']).toBe('60');
    // Nothing was taken by the checks: two more still fit, and a third does not.
    expect(admit(limiter, grant, 3)).toBe(2);
  });
});
