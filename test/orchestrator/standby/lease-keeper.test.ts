import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { keepLease, waitForLease, type LeaseTiming } from '../../../src/orchestrator/standby/lease-keeper.js';
import type { LeaseHolder, MeshLease } from '../../../src/orchestrator/store/index.js';
import { FakeClock } from '../../helpers/fake-clock.js';

/**
 * The lease's loops on a FakeClock, against a lease that answers as told: a standby tries every third of a lease, the
 * holder renews every third and, while the database is away, every 100 ms; no timer but the clock's, no sleeps.
 */
const TTL_MS = 3000;
const log = pino({ level: 'silent' });
/** Let the loop's awaits run (the fake lease answers at once). */
const settle = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** A lease whose answers a test sets; it records what was asked of it. */
function scriptedLease(): MeshLease & { asked: string[]; acquire: boolean; renewal: () => Promise<boolean>; holderNow: LeaseHolder | null } {
  const lease = {
    id: 'o_test',
    asked: [] as string[],
    acquire: false,
    renewal: async () => true,
    holderNow: { holder: 'o_other', url: 'http://nas1:7070', epoch: 4, expired: false } as LeaseHolder | null,
    fence: () => null,
    async tryAcquire() { lease.asked.push('tryAcquire'); return lease.acquire; },
    async renew() { lease.asked.push('renew'); return lease.renewal(); },
    async release() { lease.asked.push('release'); },
    async holder() { return lease.holderNow; },
    async heartbeat(role: 'active' | 'standby') { lease.asked.push(`heartbeat ${role}`); },
    async orchestrators() { return []; },
    async sharedSecret(local: string) { return local; },
    async close() {},
  };
  return lease;
}

describe('standing by for the lease', () => {
  it('tries every third of a lease, says it stands by, tells who runs the mesh, and returns once it holds the lease', async () => {
    const clock = new FakeClock();
    const lease = scriptedLease();
    const actives: (string | null)[] = [];
    const timing: LeaseTiming = { lease, clock, ttlMs: TTL_MS, log };
    let held = false;
    void waitForLease(timing, { url: 'http://nas2:7070', onActive: (url) => actives.push(url) }).then(() => (held = true));
    await settle();
    expect(lease.asked).toEqual(['tryAcquire', 'heartbeat standby']);
    expect(actives).toEqual(['http://nas1:7070']);
    clock.advance(TTL_MS / 3 - 1);
    await settle();
    expect(lease.asked).toHaveLength(2); // not before a third of a lease
    lease.acquire = true;
    clock.advance(101); // a third, and at most 100 ms that keep standbys out of step
    await settle();
    expect(lease.asked).toEqual(['tryAcquire', 'heartbeat standby', 'tryAcquire']);
    expect(held).toBe(true);
    expect(clock.pending()).toBe(0);
  });

  it('a database that does not answer is waited for, on the same beat', async () => {
    const clock = new FakeClock();
    const lease = scriptedLease();
    lease.tryAcquire = async () => { lease.asked.push('tryAcquire'); throw new Error('connection refused'); };
    void waitForLease({ lease, clock, ttlMs: TTL_MS, log }, { url: 'http://nas2:7070', onActive: () => {} });
    await settle();
    clock.advance(TTL_MS / 3 + 100);
    await settle();
    expect(lease.asked).toEqual(['tryAcquire', 'tryAcquire']);
  });
});

describe('keeping the lease', () => {
  it('renews every third of a lease with a heartbeat as the active one, every 100 ms while the database is away, and stops when told', async () => {
    const clock = new FakeClock();
    const lease = scriptedLease();
    const lost: string[] = [];
    const running = new AbortController();
    const done = keepLease({ lease, clock, ttlMs: TTL_MS, log }, running.signal, (reason) => lost.push(reason));
    await settle();
    expect(lease.asked).toEqual(['renew', 'heartbeat active']);
    clock.advance(TTL_MS / 3);
    await settle();
    expect(lease.asked).toEqual(['renew', 'heartbeat active', 'renew', 'heartbeat active']);
    lease.asked.length = 0;
    // The database goes away: tried every 100 ms, not every third of a lease.
    lease.renewal = async () => { throw new Error('connection refused'); };
    clock.advance(TTL_MS / 3);
    await settle();
    clock.advance(100);
    await settle();
    clock.advance(100);
    await settle();
    expect(lease.asked).toEqual(['renew', 'renew', 'renew']);
    lease.renewal = async () => true;
    clock.advance(100);
    await settle();
    expect(lease.asked.slice(3)).toEqual(['renew', 'heartbeat active']);
    running.abort();
    await done;
    expect(clock.pending()).toBe(0);
    expect(lost).toEqual([]);
  });

  it('a renewal that finds the lease another\'s says it was lost; one that answers after a stop does not', async () => {
    const clock = new FakeClock();
    const lease = scriptedLease();
    lease.renewal = async () => false;
    const lost: string[] = [];
    await keepLease({ lease, clock, ttlMs: TTL_MS, log }, new AbortController().signal, (reason) => lost.push(reason));
    expect(lost).toEqual(['another orchestrator took the lease over']);

    // Stopped while a renewal was out (the lease let go on shutdown, so the renewal finds it gone): not a loss.
    const stopping = new AbortController();
    lease.renewal = async () => { stopping.abort(); return false; };
    await keepLease({ lease, clock, ttlMs: TTL_MS, log }, stopping.signal, (reason) => lost.push(reason));
    expect(lost).toHaveLength(1);
  });
});
