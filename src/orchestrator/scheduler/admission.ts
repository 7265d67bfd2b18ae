import { MeshError } from '../../protocol/index.js';
import type { GrantRate } from '../auth/index.js';
import type { Clock } from '../../protocol/clock.js';
import { GrantRateLimiter } from './rates.js';

const DRAIN_WINDOW_MS = 30_000;
const MAX_RETRY_AFTER_S = 60;

/**
 * Admission control: bounded queues and per-grant rates. Refusals are 429s
 * whose Retry-After comes from how fast the queue has drained recently.
 */
export class Admission {
  readonly #clock: Clock;
  /** Per model: when jobs left the queue (for the drain rate). */
  readonly #drains = new Map<string, number[]>();
  readonly #rates: GrantRateLimiter;

  constructor(clock: Clock) {
    this.#clock = clock;
    this.#rates = new GrantRateLimiter(clock);
  }

  /** Jobs per second that left this model's queue over the last 30 s. */
  drainRate(model: string): number {
    const now = this.#clock.now();
    const times = this.#prune(this.#drains.get(model) ?? [], now - DRAIN_WINDOW_MS);
    this.#drains.set(model, times);
    if (times.length === 0) return 0;
    return times.length / (Math.max(1000, now - times[0]!) / 1000);
  }

  recordDrain(model: string, count: number): void {
    let times = this.#drains.get(model);
    if (!times) this.#drains.set(model, (times = []));
    const now = this.#clock.now();
    for (let i = 0; i < count; i++) times.push(now);
    if (times.length > 10_000) times.splice(0, times.length - 10_000);
  }

  /** Seconds until `excess` more jobs are likely to have drained; at least 1. */
  retryAfter(model: string, excess: number): number {
    const rate = this.drainRate(model);
    if (rate <= 0) return 5;
    return Math.min(MAX_RETRY_AFTER_S, Math.max(1, Math.ceil(excess / rate)));
  }

  /** Throw 429 when the model's queue or the whole mesh is at its bound. */
  checkBounds(model: string, depth: number, limit: number, totalDepth: number, totalLimit: number): void {
    if (depth >= limit) {
      const retryAfter = this.retryAfter(model, depth - limit + 1);
      throw new MeshError('QUEUE_FULL', { model, depth, limit, retryAfter }, { headers: { 'retry-after': String(retryAfter) } });
    }
    if (totalDepth >= totalLimit) {
      const retryAfter = this.retryAfter(model, totalDepth - totalLimit + 1);
      throw new MeshError('MESH_FULL', { limit: totalLimit, retryAfter }, { headers: { 'retry-after': String(retryAfter) } });
    }
  }

  /** Count one job against every rate caveat of its grant; 429 with Retry-After when one is full (see GrantRateLimiter). */
  takeRate(rates: readonly GrantRate[]): void {
    this.#rates.take(rates);
  }

  /** Whether `count` more jobs fit every rate caveat of the grant now, taking nothing: 429 as `takeRate` when not. */
  checkRate(rates: readonly GrantRate[], count: number): void {
    this.#rates.check(rates, count);
  }

  /** Drop the times at or before `since`: a window of a minute holds what happened in the last 60 s, exclusive. */
  #prune(times: number[], since: number): number[] {
    let drop = 0;
    while (drop < times.length && times[drop]! <= since) drop++;
    return drop === 0 ? times : times.slice(drop);
  }
}
