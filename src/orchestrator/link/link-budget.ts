/** A link's allowance of messages: `perSecond` on average, `burst` at once. */
export interface LinkBudgetSettings {
  perSecond: number;
  burst: number;
  /** A link that keeps exceeding its budget this long — its allowance never back to half its burst — is closed. */
  closeAfterMs: number;
}

export type BudgetVerdict = 'ok' | 'over' | 'close';

/**
 * One link's message budget, a token bucket: a message spends a token, tokens come back at `perSecond` up to
 * `burst`. A message with no token left is dropped unread ('over'). A link that keeps exceeding its budget — from
 * its first dropped message, its allowance never recovers to half its burst — for `closeAfterMs` is to be closed
 * ('close'): a flood at any rate above the budget is closed, a burst that then eases is not. A legitimate agent
 * sends a message or two per job, so the defaults sit well above what the mesh can run; what they stop is one link
 * taking the orchestrator's event loop from every other.
 */
export class LinkBudget {
  readonly #settings: LinkBudgetSettings;
  #tokens: number;
  #refilledAt: number;
  /** The first message dropped since the allowance was last at half its burst or more; null: none. */
  #overSince: number | null = null;
  /** Messages dropped since the link opened. */
  dropped = 0;

  constructor(settings: LinkBudgetSettings, now: number) {
    this.#settings = settings;
    this.#tokens = settings.burst;
    this.#refilledAt = now;
  }

  take(now: number): BudgetVerdict {
    const { perSecond, burst, closeAfterMs } = this.#settings;
    this.#tokens = Math.min(burst, this.#tokens + ((now - this.#refilledAt) * perSecond) / 1000);
    this.#refilledAt = now;
    if (this.#tokens >= burst / 2) this.#overSince = null;
    if (this.#tokens >= 1) {
      this.#tokens -= 1;
      return 'ok';
    }
    this.dropped++;
    this.#overSince ??= now;
    return now - this.#overSince >= closeAfterMs ? 'close' : 'over';
  }
}
