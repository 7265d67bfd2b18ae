import type { Clock, Timer } from '../../protocol/clock.js';

/** Node runs a timer longer than this (about 24.8 days) after 1 ms: a later deadline is reached in steps. */
const LONGEST_TIMER_MS = 2 ** 31 - 1;

/**
 * Deadlines that are mostly never reached, behind one timer. A batch's attempt timeout is seconds away and the batch
 * ends in a millisecond: with a Node timer each, every batch set and cleared two of them (a Timeout object each, and
 * a timer list for every distinct duration). Here a deadline is an entry in a map. The one timer moves only when a
 * deadline earlier than it is set; when the deadline it was set for is dropped it is left to fire, and when it fires
 * it calls those that are due and sets itself for the earliest left — a scan of every entry, so it is for a few
 * dozen (batches in flight), not for every queued job (cancellation.ts keeps a timer per job deadline).
 */
export class Deadlines<K> {
  readonly #clock: Clock;
  readonly #onDue: (key: K) => void;
  readonly #at = new Map<K, number>();
  #timer: { at: number; timer: Timer } | null = null;

  constructor(clock: Clock, onDue: (key: K) => void) {
    this.#clock = clock;
    this.#onDue = onDue;
  }

  /** Call `onDue(key)` at `at` (the clock's time), unless the key is set again or deleted first. */
  set(key: K, at: number): void {
    this.#at.set(key, at);
    if (!this.#timer || at < this.#timer.at) this.#arm(at);
  }

  delete(key: K): void {
    this.#at.delete(key);
  }

  close(): void {
    this.#timer?.timer.cancel();
    this.#timer = null;
    this.#at.clear();
  }

  #arm(at: number): void {
    this.#timer?.timer.cancel();
    this.#timer = { at, timer: this.#clock.setTimer(Math.min(at - this.#clock.now(), LONGEST_TIMER_MS), () => this.#fire()) };
  }

  #fire(): void {
    this.#timer = null;
    const now = this.#clock.now();
    const due: K[] = [];
    let next = Infinity;
    // A timer may fire a moment before the clock reaches its time, or be a step towards a far one: what is not due yet
    // sets it again.
    for (const [key, at] of this.#at) {
      if (at <= now) due.push(key);
      else next = Math.min(next, at);
    }
    for (const key of due) this.#at.delete(key);
    if (next < Infinity) this.#arm(next);
    for (const key of due) this.#onDue(key);
  }
}
