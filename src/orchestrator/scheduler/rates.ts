import { LRUCache } from 'lru-cache';
import { MeshError } from '../../protocol/index.js';
import type { GrantRate } from '../auth/index.js';
import type { Clock } from '../../protocol/clock.js';

/** Most admission times remembered across all limiters (8 bytes each); the least recently used limiter goes first. */
const MAX_REMEMBERED = 4_000_000;

const UNIT_NAMES: Record<number, string> = { 1000: 'second', 60_000: 'minute', 3_600_000: 'hour' };

function describe(rate: GrantRate): string {
  const unit = UNIT_NAMES[rate.windowMs] ?? `${rate.windowMs} ms`;
  return `${rate.count} ${rate.count === 1 ? 'job' : 'jobs'} per ${unit} (caveat "${rate.caveat}")`;
}

/**
 * The `rate` caveats of grants, each a sliding-window limiter: at most
 * `count` jobs in any window of `windowMs` ending now. A limiter is keyed by
 * its caveat's place in the grant's chain (`GrantRate.key`), so every
 * narrowing of a grant shares the allowance of each rate it inherits, and a
 * rate a narrowing adds limits that narrowing (and its own narrowings) on top.
 * A job is admitted only if it fits every limiter of its grant, and then
 * counts against all of them; a refused job counts against none.
 */
export class GrantRateLimiter {
  readonly #clock: Clock;
  /** Per limiter key: when the jobs still in its window were admitted, oldest first. */
  readonly #admitted = new LRUCache<string, number[]>({
    maxSize: MAX_REMEMBERED,
    sizeCalculation: (times) => Math.max(1, times.length),
  });

  constructor(clock: Clock) {
    this.#clock = clock;
  }

  /** Count one job against every rate; throws RATE_LIMITED (429, Retry-After) when one of them is full. */
  take(rates: readonly GrantRate[]): void {
    if (rates.length === 0) return;
    const now = this.#clock.now();
    const windows = this.#fitting(rates, 1, now);
    rates.forEach((rate, index) => {
      const times = windows[index]!;
      times.push(now);
      this.#admitted.set(rate.key, times);
    });
  }

  /** Throws as `take` would if `count` more jobs were taken now, taking nothing (a request of several jobs, checked before any is admitted). */
  check(rates: readonly GrantRate[], count: number): void {
    if (rates.length > 0 && count > 0) this.#fitting(rates, count, this.#clock.now());
  }

  /** Each rate's admission times in its window, once `count` more are known to fit in every one; RATE_LIMITED otherwise. */
  #fitting(rates: readonly GrantRate[], count: number, now: number): number[][] {
    let refusal: { rate: GrantRate; retryAfterMs: number } | null = null;
    const windows = rates.map((rate) => {
      const times = this.#inWindow(rate, now);
      const excess = times.length + count - rate.count;
      if (excess > 0) {
        // The excess-th oldest job in the window leaves it at times[excess - 1] + window; then the count fits. More
        // than the rate allows at all never fits: a whole window is the honest hint.
        const retryAfterMs = excess <= times.length ? times[excess - 1]! + rate.windowMs - now : rate.windowMs;
        if (!refusal || retryAfterMs > refusal.retryAfterMs) refusal = { rate, retryAfterMs };
      }
      return times;
    });
    if (refusal) {
      const { rate, retryAfterMs } = refusal as { rate: GrantRate; retryAfterMs: number };
      const retryAfter = Math.max(1, Math.ceil(retryAfterMs / 1000));
      throw new MeshError('RATE_LIMITED', { rate: describe(rate), retryAfter }, { headers: { 'retry-after': String(retryAfter) } });
    }
    return windows;
  }

  /** The admission times still inside this rate's window (the window is (now - windowMs, now]). */
  #inWindow(rate: GrantRate, now: number): number[] {
    const times = this.#admitted.get(rate.key);
    if (!times) return [];
    let drop = 0;
    while (drop < times.length && times[drop]! <= now - rate.windowMs) drop++;
    return drop === 0 ? times : times.slice(drop);
  }
}
