import type { Logger } from 'pino';
import type { Clock, Timer } from '../../protocol/clock.js';

/** The work a drain waits for. */
export interface Work {
  /** Batches running. */
  batches: number;
  /** Results not acknowledged yet. */
  unacknowledged: number;
}

export interface DrainDeps {
  /** The work held now. */
  work(): Work;
  /** Tell the orchestrator the agent is draining (it routes nothing new here); if the link is down, the next hello says so. */
  announce(): void;
  /** Close the agent: the link normally (the orchestrator records that the host left), the engines, the rest. */
  close(): Promise<void>;
  /** For `leave`'s limit. */
  clock: Clock;
  log: Logger;
}

/**
 * Draining and leaving: stop taking work, finish what is held, and go. Batches the orchestrator sent before it
 * heard still run; the drain is over once nothing runs and every result is acknowledged.
 */
export class Drain {
  readonly #deps: DrainDeps;
  /** Set once the agent drains: resolved when the work is done. */
  #drain: { done: Promise<void>; resolve: () => void } | null = null;

  constructor(deps: DrainDeps) {
    this.#deps = deps;
  }

  get draining(): boolean {
    return this.#drain !== null;
  }

  /** Start draining (once; later calls return the same promise), resolved when the work is done. */
  start(): Promise<void> {
    if (!this.#drain) {
      let resolve!: () => void;
      const done = new Promise<void>((settle) => (resolve = settle));
      this.#drain = { done, resolve };
      this.#deps.log.info(this.#deps.work(), 'draining: finishing the work in flight, taking no more');
      this.#deps.announce();
      this.check();
    }
    return this.#drain.done;
  }

  /** The work held changed: a drain whose work is done is over. */
  check(): void {
    if (!this.#drain) return;
    const { batches, unacknowledged } = this.#deps.work();
    if (batches === 0 && unacknowledged === 0) this.#drain.resolve();
  }

  /** Drain, then close. False if `timeoutMs` ran out first (the orchestrator fails the unfinished work over). */
  async leave(options: { timeoutMs?: number } = {}): Promise<boolean> {
    let timer: Timer | undefined;
    const drained = await Promise.race([
      this.start().then(() => true),
      new Promise<boolean>((resolve) => {
        if (options.timeoutMs !== undefined) timer = this.#deps.clock.setTimer(options.timeoutMs, () => resolve(false));
      }),
    ]);
    timer?.cancel();
    if (!drained) this.#deps.log.warn(this.#deps.work(), 'the drain timed out; leaving with work unfinished (the orchestrator fails it over)');
    await this.#deps.close();
    return drained;
  }
}
