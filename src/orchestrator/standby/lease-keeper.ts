import type { Logger } from 'pino';
import { sleep, type Clock } from '../../protocol/clock.js';
import type { MeshLease } from '../store/index.js';

/** How often a renewal that failed (the database away) is tried again. */
const RENEWAL_RETRY_MS = 100;

export interface LeaseTiming {
  lease: MeshLease;
  clock: Clock;
  /** The lease's length (ms): it is tried, and renewed, every third of it. */
  ttlMs: number;
  log: Logger;
}

/**
 * Stand by until this orchestrator holds the lease: try to take it every third of a lease (and up to 100 ms more, so
 * standbys started together do not ask in step), saying meanwhile that this one (serving at `url`) stands by — its
 * heartbeat — and telling `onActive` where the orchestrator that runs the mesh serves. A database that does not answer
 * is waited for.
 */
export async function waitForLease(timing: LeaseTiming, standby: { url: string; onActive(url: string | null): void }): Promise<void> {
  const { lease, clock, ttlMs, log } = timing;
  let standingBy = false;
  for (;;) {
    try {
      if (await lease.tryAcquire()) return;
      const holder = await lease.holder();
      standby.onActive(holder?.url ?? null);
      await lease.heartbeat('standby');
      if (!standingBy) log.info({ orchestrator: lease.id, active: holder?.url ?? null, url: standby.url }, 'standing by: another orchestrator runs the mesh; this one takes over when its lease runs out');
      standingBy = true;
    } catch (error) {
      log.warn({ err: error }, 'PostgreSQL does not answer; standing by');
    }
    await new Promise<void>((resolve) => clock.setTimer(ttlMs / 3 + Math.random() * 100, resolve));
  }
}

/**
 * Keep the lease while the mesh runs here: renewed every third of it, with a heartbeat as the active one. A renewal that
 * fails (the database away) is tried again every 100 ms, so once the database is back the holder renews well before a
 * standby may take the lease over (half a lease after it saw it run out). A renewal that finds the lease another's
 * calls `onLost`; `signal` ends the renewals (the orchestrator stopped, or lost the lease another way).
 */
export async function keepLease(timing: LeaseTiming, signal: AbortSignal, onLost: (reason: string) => void): Promise<void> {
  const { lease, clock, ttlMs, log } = timing;
  let failing = false;
  while (!signal.aborted) {
    let waitMs = ttlMs / 3;
    try {
      const renewed = await lease.renew();
      // Stopped while the renewal was out: the lease was let go on purpose, not lost.
      if (signal.aborted) return;
      if (!renewed) return onLost('another orchestrator took the lease over');
      if (failing) log.info('renewed the mesh lease again');
      failing = false;
      await lease.heartbeat('active');
    } catch (error) {
      if (!failing) log.warn({ err: error }, 'could not renew the mesh lease (PostgreSQL does not answer); trying every 100 ms, writes wait, fenced by the lease');
      failing = true;
      waitMs = RENEWAL_RETRY_MS;
    }
    await sleep(clock, waitMs, signal).catch(() => {}); // aborted: the loop ends
  }
}
