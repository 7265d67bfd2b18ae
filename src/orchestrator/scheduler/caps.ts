import { MeshError } from '../../protocol/index.js';
import type { Clock } from '../../protocol/clock.js';
import type { GrantCaps } from '../auth/index.js';

const DAY_MS = 86_400_000;

/** A cap and its use now, as the grant views and `gpumesh grant show` tell it. */
export interface CapUse {
  limit: number;
  used: number;
  left: number;
  /** When the use counts from zero again (device time: the next UTC midnight); null where it drains instead (queued jobs). */
  refillsAt: string | null;
}

export interface LineageCapsDeps {
  clock: Clock;
  /** Jobs of a lineage waiting in a queue now (Scheduler.queuedOf). */
  queuedOf(lineage: string): number;
}

/**
 * The caps of grant lineages: jobs queued at once, and device-seconds per UTC day. A lineage is the grant the
 * orchestrator minted and every grant narrowed from it (they share its id), so a cap on a family member's grant holds
 * for everything they narrowed from it together; a narrowing's own, lower cap is held to the same lineage-wide use.
 *
 * Device time is the engine's compute time of the lineage's succeeded jobs, each its share of its batch (the batch's
 * time over its size), counted per UTC day: it refills at midnight UTC, one moment a person can be told, rather than
 * trickling back as a rolling window would. A job is admitted while the day's use is below the cap — its cost is not
 * known until it ran — so the jobs admitted last may take the use a little over it. Use survives a restart: it is read
 * back from the day's finished jobs at start (`restore`).
 */
export class LineageCaps {
  readonly #deps: LineageCapsDeps;
  /** Device milliseconds per lineage, on the UTC day `#day`. */
  #used = new Map<string, number>();
  #day = -1;

  constructor(deps: LineageCapsDeps) {
    this.#deps = deps;
  }

  /** The start of the current UTC day (epoch ms): what `restore` reads from. */
  dayStart(): number {
    return Math.floor(this.#deps.clock.now() / DAY_MS) * DAY_MS;
  }

  /** At start: the device milliseconds each lineage used since `since` (the day's start), from the store. */
  restore(since: number, used: ReadonlyMap<string, number>): void {
    if (Math.floor(since / DAY_MS) !== this.#today()) return;
    for (const [lineage, ms] of used) this.#used.set(lineage, (this.#used.get(lineage) ?? 0) + ms);
  }

  /** A succeeded job of `lineage` computed for `deviceMs` (its share of its batch). */
  charge(lineage: string, deviceMs: number): void {
    this.#today();
    if (deviceMs > 0) this.#used.set(lineage, (this.#used.get(lineage) ?? 0) + deviceMs);
  }

  /**
   * Throws 429 when admitting `count` more jobs of `lineage` would pass a cap. `drainRetryAfter(excess)`: seconds until
   * `excess` queued jobs are likely to have left (the model's drain rate).
   */
  check(lineage: string, caps: GrantCaps, count: number, drainRetryAfter: (excess: number) => number): void {
    const { maxQueued, deviceSecondsPerDay } = caps;
    if (maxQueued) {
      const queued = this.#deps.queuedOf(lineage);
      if (queued + count > maxQueued.limit) {
        const left = Math.max(0, maxQueued.limit - queued);
        const retryAfter = drainRetryAfter(queued + count - maxQueued.limit);
        throw new MeshError('QUEUED_CAP_REACHED', { limit: maxQueued.limit, caveat: maxQueued.caveat, queued, left, asked: count, retryAfter }, {
          headers: { 'retry-after': String(retryAfter) }, details: { cap: 'max-queued', limit: maxQueued.limit, used: queued, left, retryAfter },
        });
      }
    }
    if (deviceSecondsPerDay) {
      const use = this.#deviceUse(lineage, deviceSecondsPerDay.limit);
      if (use.left <= 0) {
        const retryAfter = Math.max(1, Math.ceil((Date.parse(use.refillsAt!) - this.#deps.clock.now()) / 1000));
        throw new MeshError('DEVICE_TIME_CAP_REACHED', { ...use, caveat: deviceSecondsPerDay.caveat, retryAfter }, {
          headers: { 'retry-after': String(retryAfter) },
          details: { cap: 'device-seconds-per-day', limit: use.limit, used: use.used, left: use.left, refillsAt: use.refillsAt!, retryAfter },
        });
      }
    }
  }

  /** Each cap of `caps` with the lineage's use now. */
  usage(lineage: string, caps: GrantCaps): { maxQueued: CapUse | null; deviceSecondsPerDay: CapUse | null } {
    const queued = caps.maxQueued ? this.#deps.queuedOf(lineage) : 0;
    return {
      maxQueued: caps.maxQueued
        ? { limit: caps.maxQueued.limit, used: queued, left: Math.max(0, caps.maxQueued.limit - queued), refillsAt: null }
        : null,
      deviceSecondsPerDay: caps.deviceSecondsPerDay ? this.#deviceUse(lineage, caps.deviceSecondsPerDay.limit) : null,
    };
  }

  /** Device-seconds used today (to the tenth), what is left of `limit`, and the next UTC midnight. */
  #deviceUse(lineage: string, limit: number): CapUse {
    const day = this.#today();
    const used = Math.round((this.#used.get(lineage) ?? 0) / 100) / 10;
    return { limit, used, left: Math.max(0, Math.round((limit - used) * 10) / 10), refillsAt: new Date((day + 1) * DAY_MS).toISOString() };
  }

  /** The UTC day now; a new day forgets the last one's use. */
  #today(): number {
    const day = Math.floor(this.#deps.clock.now() / DAY_MS);
    if (day !== this.#day) {
      this.#day = day;
      this.#used = new Map();
    }
    return day;
  }
}
