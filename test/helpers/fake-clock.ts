import type { Clock, Timer } from '../../src/protocol/clock.js';

/** A clock that moves only when told to; timers fire in time order during `advance`. */
export class FakeClock implements Clock {
  #now: number;
  #timers: { at: number; seq: number; fn: () => void; cancelled: boolean }[] = [];
  #seq = 0;

  readonly #timersFireEarlyMs: number;

  /** `timersFireEarlyMs` plays Node's timers, which may fire a millisecond before `Date.now()` reaches their moment. */
  constructor(start = 1_000_000, { timersFireEarlyMs = 0 } = {}) {
    this.#now = start;
    this.#timersFireEarlyMs = timersFireEarlyMs;
  }

  now(): number {
    return this.#now;
  }

  setTimer(ms: number, fn: () => void): Timer {
    const timer = { at: this.#now + Math.max(Math.min(ms, 1), ms - this.#timersFireEarlyMs, 0), seq: this.#seq++, fn, cancelled: false };
    this.#timers.push(timer);
    return { cancel: () => { timer.cancelled = true; } };
  }

  advance(ms: number): void {
    const target = this.#now + ms;
    for (;;) {
      const due = this.#timers
        .filter((timer) => !timer.cancelled && timer.at <= target)
        .sort((a, b) => a.at - b.at || a.seq - b.seq)[0];
      if (!due) break;
      due.cancelled = true;
      // A timer overdue after a stall runs late, at the time it is now.
      this.#now = Math.max(this.#now, due.at);
      due.fn();
    }
    this.#timers = this.#timers.filter((timer) => !timer.cancelled);
    this.#now = target;
  }

  /** Time passes with the event loop blocked: no timer runs; those that came due run late, at the next `advance`. */
  stall(ms: number): void {
    this.#now += ms;
  }

  pending(): number {
    return this.#timers.filter((timer) => !timer.cancelled).length;
  }
}
