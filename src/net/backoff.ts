import { decorrelatedJitterGenerator, ExponentialBackoff, type GeneratorFn, type IBackoff, type IBackoffFactory } from 'cockatiel';

/** Delays that start at `initialMs` and grow by `factor` up to `maxMs` (the shape of protocol's BackoffSettings). */
export interface BackoffOptions {
  /** The first delay. */
  initialMs: number;
  /** No delay is longer than this. */
  maxMs: number;
  /** Each delay is this many times the one before. Default 2. */
  factor?: number;
  /**
   * Spread the delays at random (cockatiel's decorrelated jitter), for a client one of many that lost the same server
   * at once: without it they would all come back in step. Default: none (a host pacing its own work, a test).
   */
  jitter?: boolean;
}

/** cockatiel's no-jitter generator, growing by the exponent it is given (its own always doubles). */
const geometric: GeneratorFn<number> = (attempt = 0, options) => [
  Math.min(options.maxDelay, options.initialDelay * options.exponent ** attempt), attempt + 1,
];

/**
 * The one way a delay grows in gpumesh — redials, retries, polls, restart pacing, breaker open periods: cockatiel's
 * exponential backoff, taken a delay at a time. `next()` is the next delay; `reset()` starts again from the first
 * (something changed: the link came up, the server moved on).
 */
export class Backoff {
  readonly #start: IBackoffFactory<unknown>;
  #current: IBackoff<unknown> | null = null;

  constructor(options: BackoffOptions) {
    const shape = { initialDelay: options.initialMs, maxDelay: options.maxMs, exponent: options.factor ?? 2 };
    this.#start = options.jitter
      ? new ExponentialBackoff({ ...shape, generator: decorrelatedJitterGenerator })
      : new ExponentialBackoff({ ...shape, generator: geometric });
  }

  next(): number {
    this.#current = this.#current ? this.#current.next(undefined) : this.#start.next(undefined);
    return this.#current.duration;
  }

  reset(): void {
    this.#current = null;
  }
}

/**
 * The delay before try number `attempt` (1: the first retry) on the same curve, for work that counts its own tries —
 * a job's retries, a host's refusals — where keeping a Backoff per thing would be state for nothing.
 */
export function backoffDelay(options: BackoffOptions, attempt: number): number {
  const backoff = new Backoff(options);
  let delay = 0;
  for (let tried = 0; tried < Math.max(1, attempt); tried++) delay = backoff.next();
  return delay;
}
