import { setTimeout as pause } from 'node:timers/promises';
import type { Clock, Timer } from '../../protocol/clock.js';
import type { BlobReclaimer } from '../blobs/reclaim.js';
import type { Commits, MeshStore } from '../store/index.js';

const DAY_MS = 86_400_000;

export interface JobRetentionDeps {
  store: MeshStore;
  commits: Commits;
  clock: Clock;
  reclaimer: BlobReclaimer;
  /** Finished jobs without published results are kept this many days; 0 keeps them for ever (blobs nothing names still go). */
  days: number;
  /**
   * Jobs deleted per transaction: small enough that one never holds the event loop for long (SQLite's reads and writes
   * are synchronous). Default 500: about 11 ms a batch on the reference VM, where 2,000 held it 30 ms
   * (`npm run bench:retention`).
   */
  batch?: number;
}

/** What one sweep deleted. */
export interface SweptJobs {
  jobs: number;
  /**
   * Blobs given back, and their bytes: those only the deleted jobs named (outputs of failed attempts, input pictures),
   * and any that nothing named at all.
   */
  freed: number;
  freedBytes: number;
}

/**
 * Keeps the store from growing without end: every OIP infer and every tensor job is a durable job, and a mesh busy
 * with them writes millions of rows a day. Finished jobs that no published result names — failed, cancelled or
 * expired jobs, tensor jobs (every OIP infer), jobs whose results were deleted — are deleted `days` after they finished,
 * with their attempts and the rows of what they uploaded or started from; those blobs go too, once nothing else names
 * them (BlobReclaimer). A pipeline goes with the last of its jobs. Jobs whose results are in the gallery stay as long as their results do. Idempotency keys live
 * a day, so no retention can cut one short (it is at least a day).
 */
export class JobRetention {
  readonly #deps: JobRetentionDeps;
  #timer: Timer | null = null;

  constructor(deps: JobRetentionDeps) {
    this.#deps = deps;
  }

  /**
   * Delete every job the retention no longer keeps, a batch per transaction (none with 0 days), then give back the
   * blobs nothing names.
   */
  async sweep(): Promise<SweptJobs> {
    const { reclaimer } = this.#deps;
    const swept = this.#deps.days === 0 ? { jobs: 0, freed: 0, freedBytes: 0 } : await this.#deleteJobs();
    // Then whatever nothing names at all, which no deletion hands over (BlobReclaimer.sweepUnnamed).
    const orphans = await reclaimer.sweepUnnamed();
    swept.freed += orphans.freed.length;
    swept.freedBytes += orphans.freedBytes;
    return swept;
  }

  async #deleteJobs(): Promise<SweptJobs> {
    const { store, commits, clock, reclaimer, days } = this.#deps;
    const swept: SweptJobs = { jobs: 0, freed: 0, freedBytes: 0 };
    const batch = this.#deps.batch ?? 500;
    const before = clock.now() - days * DAY_MS;
    for (;;) {
      const started = performance.now();
      const { ids, digests } = await store.jobs.prunableJobs(before, batch);
      if (ids.length === 0) break;
      commits.write(() => {
        store.jobs.deleteJobs(ids);
        // A pipeline is only a name for its jobs: once the last of them is gone, so is it (its id then answers 404).
        store.pipelines.forgetJobs(ids);
      });
      await commits.durable();
      // A backlog (a busy day's infers) is worked off at half the event loop at most: after each batch, a pause as
      // long as it took, so requests keep being served between batches (SQLite's statements hold the loop).
      await pause(performance.now() - started);
      const reclaimed = await reclaimer.release(digests);
      swept.jobs += ids.length;
      swept.freed += reclaimed.freed.length;
      swept.freedBytes += reclaimed.freedBytes;
      if (ids.length < batch) break;
    }
    return swept;
  }

  /** Sweep every `everyMs` until closed, telling `swept` what each sweep did (or why it could not). */
  sweepEvery(everyMs: number, swept: (result: SweptJobs | null, error?: unknown) => void): void {
    this.#timer = this.#deps.clock.setTimer(everyMs, () => {
      void this.sweep().then((result) => swept(result), (error: unknown) => swept(null, error)).finally(() => {
        if (this.#timer) this.sweepEvery(everyMs, swept);
      });
    });
  }

  close(): void {
    this.#timer?.cancel();
    this.#timer = null;
  }
}
