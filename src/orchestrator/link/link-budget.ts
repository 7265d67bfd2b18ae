/** A link's allowance of messages: `perSecond` on average, `burst` at once. */
export interface LinkBudgetSettings {
  perSecond: number;
  burst: number;
  /** A link that keeps exceeding its budget this long — its allowance never back to half its burst — is closed. */
  closeAfterMs: number;
}

export type BudgetVerdict = 'ok' | 'over' | 'close';

/**
 * One link's message budget, a token bucket: a message spends a token (and one more for each thing it named that
 * was refused: `charge`), tokens come back at `perSecond` up to
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
    const { burst, closeAfterMs } = this.#settings;
    this.#refill(now);
    if (this.#tokens >= burst / 2) this.#overSince = null;
    if (this.#tokens >= 1) {
      this.#tokens -= 1;
      return 'ok';
    }
    this.dropped++;
    this.#overSince ??= now;
    return now - this.#overSince >= closeAfterMs ? 'close' : 'over';
  }

  /**
   * Charge what a message turned out to cost beyond itself: a token for each thing it named that was refused (a job
   * the host does not hold, a model its grant does not allow). A legitimate agent has a few refused now and then (a
   * late report after a failover); a link that names what it does not hold by the thousand spends its allowance
   * as fast as if it had sent that many messages, and is dropped and closed like any flood. The debt is bounded by
   * one burst, so a link that stops recovers within two bursts' worth of time.
   */
  charge(now: number, tokens: number): void {
    this.#refill(now);
    this.#tokens = Math.max(-this.#settings.burst, this.#tokens - tokens);
    if (this.#tokens < 1) this.#overSince ??= now;
  }

  #refill(now: number): void {
    const { perSecond, burst } = this.#settings;
    this.#tokens = Math.min(burst, this.#tokens + ((now - this.#refilledAt) * perSecond) / 1000);
    this.#refilledAt = now;
  }
}
