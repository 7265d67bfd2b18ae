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
  #held: Report[] = [];
  #timer: NodeJS.Timeout | null = null;
  #reporting: boolean;
  #ended = false;

  constructor(send: (report: Report) => void, delayMs = REPORT_DELAY_MS) {
    this.#send = send;
    this.#delayMs = delayMs;
    this.#reporting = delayMs <= 0;
  }

  report(report: Report): void {
    if (this.#ended) return;
    if (this.#reporting) return this.#send(report);
    this.#held.push(report);
    this.#timer ??= setTimeout(() => {
      this.#timer = null;
      this.#reporting = true;
      const held = this.#held;
      this.#held = [];
      for (const report of held) this.#send(report);
    }, this.#delayMs);
  }

  /** The batch ended: reports still held are dropped, its results say it all. */
  end(): void {
    this.#ended = true;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    this.#held = [];
  }
}
