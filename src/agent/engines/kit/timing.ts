export interface BackoffOptions {
  /** The first wait. */
  initialMs: number;
  /** No wait is longer than this. */
  maxMs: number;
  /** Each wait is this many times the one before. */
  factor: number;
}

/** Waits that grow geometrically up to a ceiling; `reset` starts again from the first (something changed). */
export class Backoff {
  readonly #options: BackoffOptions;
  #next: number;

  constructor(options: BackoffOptions) {
    this.#options = options;
    this.#next = options.initialMs;
  }

  next(): number {
    const wait = this.#next;
    this.#next = Math.min(this.#options.maxMs, Math.max(1, this.#next * this.#options.factor));
    return Math.min(wait, this.#options.maxMs);
  }

  reset(): void {
    this.#next = this.#options.initialMs;
  }
}

/** Seconds (or an HTTP date) from a `Retry-After` header, as milliseconds from now; null when absent or unreadable. */
export function retryAfterMs(header: string | null, now: number): number | null {
  if (!header) return null;
  const seconds = Number(header);
  if (Number.isFinite(seconds)) return Math.max(0, seconds * 1000);
  const at = Date.parse(header);
  return Number.isNaN(at) ? null : Math.max(0, at - now);
}
