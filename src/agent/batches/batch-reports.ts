import { workClock, type Clock, type Timer } from '../../protocol/clock.js';
import type { AgentMessage } from '../../protocol/index.js';

type Report = Extract<AgentMessage, { type: 'started' | 'progress' }>;

/** How long a batch's first reports wait before they go (ms). */
export const REPORT_DELAY_MS = 10;

/**
 * A batch's `started` and `progress` reports. The first ones wait a few
 * milliseconds: a batch that ends sooner sends only its results (the
 * orchestrator reads a `done` for a job never reported started as "started,
 * then finished", dated back by its compute time). On a small machine each
 * message wakes two processes, and a tiny job's `started` and `progress` cost
 * more than the job. Once a batch has outlived the delay, its held reports go
 * and every later one goes at once, so longer jobs show each step as before.
 */
export class BatchReports {
  readonly #send: (report: Report) => void;
  readonly #delayMs: number;
  readonly #clock: Clock;
  #held: Report[] = [];
  #timer: Timer | null = null;
  #reporting: boolean;
  #ended = false;

  constructor(send: (report: Report) => void, delayMs = REPORT_DELAY_MS, clock: Clock = workClock) {
    this.#send = send;
    this.#delayMs = delayMs;
    this.#clock = clock;
    this.#reporting = delayMs <= 0;
  }

  report(report: Report): void {
    if (this.#ended) return;
    if (this.#reporting) return this.#send(report);
    this.#held.push(report);
    this.#timer ??= this.#clock.setTimer(this.#delayMs, () => {
      this.#timer = null;
      this.#reporting = true;
      const held = this.#held;
      this.#held = [];
      for (const report of held) this.#send(report);
    });
  }

  /** The batch ended: reports still held are dropped, its results say it all. */
  end(): void {
    this.#ended = true;
    this.#timer?.cancel();
    this.#timer = null;
    this.#held = [];
  }
}
