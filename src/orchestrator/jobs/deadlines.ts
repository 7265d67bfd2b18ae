import type { Clock, Timer } from '../clock.js';

/** One timer per job with a deadline, so a job expires at its moment whatever the replicas are doing. */
export class Deadlines {
  readonly #clock: Clock;
  readonly #timers = new Map<string, Timer>();
  readonly #onDeadline: (jobId: string) => void;

  constructor(clock: Clock, onDeadline: (jobId: string) => void) {
    this.#clock = clock;
    this.#onDeadline = onDeadline;
  }

  arm(jobId: string, deadlineAt: number | null): void {
    if (deadlineAt === null) return;
    this.clear(jobId);
    this.#timers.set(jobId, this.#clock.setTimer(deadlineAt - this.#clock.now(), () => {
      this.#timers.delete(jobId);
      this.#onDeadline(jobId);
    }));
  }

  clear(jobId: string): void {
    this.#timers.get(jobId)?.cancel();
    this.#timers.delete(jobId);
  }

  clearAll(): void {
    for (const timer of this.#timers.values()) timer.cancel();
    this.#timers.clear();
  }
}
