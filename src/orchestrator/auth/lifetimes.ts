import type { Clock, Timer } from '../../protocol/clock.js';
import type { GrantAuthority, VerifiedGrant } from './grants.js';

/** Node's timers overflow past 2^31 - 1 ms (about 24.8 days); longer waits are armed in steps. */
const LONGEST_TIMER_MS = 86_400_000;

export type GrantEnd = 'revoked' | 'expired';

/**
 * Ends what a grant keeps open — an event stream, an agent link — when the
 * grant is revoked or expires. A request is checked once, when it arrives;
 * a stream or a link lives on, so it must be told.
 */
export class GrantLifetimes {
  readonly #authority: GrantAuthority;
  readonly #clock: Clock;

  constructor(authority: GrantAuthority, clock: Clock) {
    this.#authority = authority;
    this.#clock = clock;
  }

  /** Call `onEnd` once, when the grant is revoked or passes its expiry; returns a function that stops watching. */
  watch(grant: VerifiedGrant, onEnd: (why: GrantEnd) => void): () => void {
    let done = false;
    let timer: Timer | null = null;
    const end = (why: GrantEnd): void => {
      if (done) return;
      stop();
      onEnd(why);
    };
    const unsubscribe = this.#authority.whenRevoked(grant.id, () => end('revoked'));
    const stop = (): void => {
      done = true;
      unsubscribe();
      timer?.cancel();
    };
    const arm = (first: boolean): void => {
      if (grant.expiresAt === null || done) return;
      const left = grant.expiresAt - this.#clock.now();
      if (left > 0) {
        timer = this.#clock.setTimer(Math.min(left, LONGEST_TIMER_MS), () => arm(false));
      } else if (first) {
        // Never synchronously from `watch`: the caller is still setting up what `onEnd` closes.
        queueMicrotask(() => end('expired'));
      } else {
        end('expired');
      }
    };
    arm(true);
    return stop;
  }
}
