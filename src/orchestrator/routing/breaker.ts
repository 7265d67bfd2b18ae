import { CircuitState, ConsecutiveBreaker, CountBreaker, type IBreaker } from 'cockatiel';
import { Backoff } from '../../net/backoff.js';
import type { BreakerView } from '../../protocol/api/index.js';
import type { BreakerState } from '../../protocol/index.js';
import type { Clock, Timer } from '../../protocol/clock.js';
import type { BreakerPolicy } from '../config/config.js';

/** A state change, for events, logs and metrics. */
export interface BreakerTransition {
  to: BreakerState;
  /** When it opened: the failure that did it and how long it stays open. */
  reason?: string;
  openForMs?: number;
}

/** Opens when either breaker says so; both always see every outcome. */
class EitherBreaker implements IBreaker {
  constructor(readonly first: IBreaker, readonly second: IBreaker) {}

  get state(): unknown {
    return [this.first.state, this.second.state];
  }

  set state(value: unknown) {
    [this.first.state, this.second.state] = value as [unknown, unknown];
  }

  success(state: CircuitState): void {
    this.first.success(state);
    this.second.success(state);
  }

  failure(state: CircuitState): boolean {
    const first = this.first.failure(state);
    const second = this.second.failure(state);
    return first || second;
  }
}

const TO_STATE: Record<CircuitState, BreakerState> = {
  [CircuitState.Closed]: 'closed', [CircuitState.Open]: 'open', [CircuitState.HalfOpen]: 'half-open', [CircuitState.Isolated]: 'open',
};

/**
 * One circuit breaker, on cockatiel's parts: its `ConsecutiveBreaker` (n
 * failures in a row) and `CountBreaker` (a failure ratio over the last
 * outcomes) decide when to open, and its exponential backoff (no jitter,
 * net/backoff.ts) gives the open periods, doubling while it keeps failing.
 *
 * The state machine is ours rather than cockatiel's `CircuitBreakerPolicy`,
 * which wraps a call it awaits: here the call is a batch sent over a link
 * whose outcome arrives later as a separate message, so outcomes are reported
 * to the breaker, not returned through it. The router must also be able to
 * *ask* without calling (a half-open breaker turns real work away while a
 * probe is its trial; the policy would queue callers behind its one test
 * call); closing may need more than one successful trial; and time must come
 * from the injected clock (the policy reads `Date.now()`), so transitions are
 * tested on a fake clock and the half-open moment is a timer, not a lazy check.
 */
export class Breaker {
  readonly #clock: Clock;
  readonly #policy: BreakerPolicy;
  readonly #onChange: (transition: BreakerTransition) => void;
  readonly #counts: EitherBreaker;
  /** How long each opening lasts: from `openForS`, doubling with each opening in a row; reset when it closes. */
  readonly #openPeriods: Backoff;
  #state = CircuitState.Closed;
  #openUntil: number | null = null;
  #timer: Timer | null = null;
  #opens = 0;
  #consecutive = 0;
  #trialSuccesses = 0;
  #lastFailure: string | null = null;

  constructor(clock: Clock, policy: BreakerPolicy, onChange: (transition: BreakerTransition) => void) {
    this.#clock = clock;
    this.#policy = policy;
    this.#onChange = onChange;
    this.#counts = new EitherBreaker(
      new ConsecutiveBreaker(policy.failuresToOpen),
      new CountBreaker({ threshold: policy.failureRatio, size: policy.window, minimumNumberOfCalls: policy.minCalls }),
    );
    this.#openPeriods = new Backoff({ initialMs: policy.openForS * 1000, maxMs: policy.maxOpenForS * 1000 });
  }

  get state(): BreakerState {
    return TO_STATE[this.#state];
  }

  /** Whether real work may go through: only while closed (half-open lets probes through, one at a time). */
  get allowsWork(): boolean {
    return this.#state === CircuitState.Closed;
  }

  success(): void {
    this.#consecutive = 0;
    if (this.#state === CircuitState.Open) return; // a batch sent before it opened; the trial decides
    if (this.#state === CircuitState.Closed) {
      this.#counts.success(CircuitState.Closed);
      return;
    }
    this.#trialSuccesses++;
    if (this.#trialSuccesses < this.#policy.successesToClose) return;
    this.#counts.success(CircuitState.HalfOpen); // resets the window and the run of failures
    this.#state = CircuitState.Closed;
    this.#openPeriods.reset();
    this.#opens = 0;
    this.#trialSuccesses = 0;
    this.#onChange({ to: 'closed' });
  }

  failure(reason: string): void {
    this.#lastFailure = reason;
    this.#consecutive++;
    // Failures of batches sent before it opened say nothing new.
    if (this.#state === CircuitState.Open) return;
    if (this.#state === CircuitState.HalfOpen) {
      this.#counts.failure(CircuitState.HalfOpen);
      this.#open(reason);
      return;
    }
    if (this.#counts.failure(CircuitState.Closed)) this.#open(reason);
  }

  view(): BreakerView {
    return {
      state: this.state, consecutiveFailures: this.#consecutive, opens: this.#opens, lastFailure: this.#lastFailure,
      openUntil: this.#openUntil === null ? null : new Date(this.#openUntil).toISOString(), trialSuccesses: this.#trialSuccesses,
    };
  }

  close(): void {
    this.#timer?.cancel();
    this.#timer = null;
  }

  #open(reason: string): void {
    const openForMs = this.#openPeriods.next();
    this.#state = CircuitState.Open;
    this.#opens++;
    this.#trialSuccesses = 0;
    this.#openUntil = this.#clock.now() + openForMs;
    this.#timer?.cancel();
    this.#timer = this.#clock.setTimer(openForMs, () => {
      this.#timer = null;
      this.#openUntil = null;
      this.#state = CircuitState.HalfOpen;
      this.#onChange({ to: 'half-open' });
    });
    this.#onChange({ to: 'open', reason, openForMs });
  }
}
