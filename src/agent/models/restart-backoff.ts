import { Backoff, type BackoffOptions } from '../../net/backoff.js';

export interface RestartBackoffOptions {
  /** The delay before the second restart in a row; it doubles with each further one. Default 1 s. */
  initialDelayMs?: number;
  /** The longest delay. Default 30 s. */
  maxDelayMs?: number;
  /** A process that ran this long before dying starts a fresh streak (its restart is immediate). Default 60 s. */
  stableAfterMs?: number;
}

interface Streak {
  /** The delays of this streak's restarts after the first (which is immediate). */
  backoff: Backoff;
  notBefore: number;
}

/**
 * When a crashed engine may start again, per key (a model): at once after
 * one crash, then after a delay that doubles with each crash in a row (1 s,
 * 2 s, 4 s … up to 30 s) so an engine that dies on every start does not
 * spin. A run that stayed up `stableAfterMs` resets the streak. No jitter:
 * this paces one host's own process, nothing contends with it.
 * Pure bookkeeping on the times it is given, so it is tested without a clock.
 */
export class RestartBackoff {
  readonly #delays: BackoffOptions;
  readonly #stableAfterMs: number;
  readonly #streaks = new Map<string, Streak>();

  constructor(options: RestartBackoffOptions = {}) {
    this.#delays = { initialMs: options.initialDelayMs ?? 1000, maxMs: options.maxDelayMs ?? 30_000 };
    this.#stableAfterMs = options.stableAfterMs ?? 60_000;
  }

  /** Record a crash at `at` of a process that had been up `upMs`; returns the delay before the next start. */
  crashed(key: string, at: number, upMs: number): number {
    const streak = this.#streaks.get(key);
    if (!streak || upMs >= this.#stableAfterMs) {
      this.#streaks.set(key, { backoff: new Backoff(this.#delays), notBefore: at });
      return 0;
    }
    const delay = streak.backoff.next();
    streak.notBefore = at + delay;
    return delay;
  }

  /** How long a start at `now` must still wait (0 when it may go ahead). */
  waitMs(key: string, now: number): number {
    const streak = this.#streaks.get(key);
    return streak ? Math.max(0, streak.notBefore - now) : 0;
  }
}
