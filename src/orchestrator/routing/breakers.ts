import type { BreakerView } from '../../protocol/api/index.js';
import type { BreakerState } from '../../protocol/index.js';
import type { Clock } from '../../protocol/clock.js';
import type { BreakerPolicy } from '../config/config.js';
import { Breaker, type BreakerTransition } from './breaker.js';

/** A breaker changed state: `model` null is the host's own (link-level) breaker. */
export interface BreakerChange extends BreakerTransition {
  host: string;
  model: string | null;
}

export interface BreakerBoardDeps {
  clock: Clock;
  policies: { replica: BreakerPolicy; host: BreakerPolicy };
}

/**
 * Every breaker of the mesh: one per host × model (failures of batches of that
 * model on that host) and one per host (its link dropping). Breakers are kept
 * by host id, so they outlive a host's sessions: a host that reconnects finds
 * its breakers as it left them. Input errors never reach a breaker — the
 * caller reports only failures another replica might not have had.
 */
export class BreakerBoard {
  readonly #deps: BreakerBoardDeps;
  readonly #replicas = new Map<string, Map<string, Breaker>>();
  readonly #hosts = new Map<string, Breaker>();
  readonly #listeners = new Set<(change: BreakerChange) => void>();

  constructor(deps: BreakerBoardDeps) {
    this.#deps = deps;
  }

  /** Run `listener` on every state change. */
  onChange(listener: (change: BreakerChange) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** A batch of `model` succeeded on `host` (or a probe did): both its breakers hear it. */
  success(host: string, model: string): void {
    this.#replica(host, model).success();
    this.#host(host).success();
  }

  /** A batch of `model` failed on `host` for a reason that may be the host's (not the input's). */
  failure(host: string, model: string, reason: string): void {
    this.#replica(host, model).failure(reason);
  }

  /** The host's link dropped (socket closed, heartbeats stopped). */
  linkLost(host: string, reason: string): void {
    this.#host(host).failure(reason);
  }

  /** The first breaker that keeps real work of `model` off `host`, or null when both are closed. */
  blocking(host: string, model: string): { model: string | null; state: BreakerState } | null {
    const own = this.#hosts.get(host);
    if (own && !own.allowsWork) return { model: null, state: own.state };
    const replica = this.#replicas.get(host)?.get(model);
    if (replica && !replica.allowsWork) return { model, state: replica.state };
    return null;
  }

  /** The state of one breaker; `model` null for the host's own. Closed if it never saw anything. */
  state(host: string, model: string | null): BreakerState {
    return (model === null ? this.#hosts.get(host) : this.#replicas.get(host)?.get(model))?.state ?? 'closed';
  }

  view(host: string, model: string | null): BreakerView {
    const breaker = model === null ? this.#hosts.get(host) : this.#replicas.get(host)?.get(model);
    return breaker?.view() ?? { state: 'closed', consecutiveFailures: 0, openUntil: null, opens: 0, lastFailure: null, trialSuccesses: 0 };
  }

  /** Models with a breaker on `host`. */
  modelsOf(host: string): string[] {
    return [...(this.#replicas.get(host)?.keys() ?? [])];
  }

  /** Every half-open breaker: each waits for a probe as its trial. */
  halfOpen(): { host: string; model: string | null }[] {
    const result: { host: string; model: string | null }[] = [];
    for (const [host, breaker] of this.#hosts) if (breaker.state === 'half-open') result.push({ host, model: null });
    for (const [host, models] of this.#replicas) {
      for (const [model, breaker] of models) if (breaker.state === 'half-open') result.push({ host, model });
    }
    return result;
  }

  /** Every breaker, for metrics. */
  *all(): IterableIterator<{ host: string; model: string | null; state: BreakerState }> {
    for (const [host, breaker] of this.#hosts) yield { host, model: null, state: breaker.state };
    for (const [host, models] of this.#replicas) for (const [model, breaker] of models) yield { host, model, state: breaker.state };
  }

  close(): void {
    for (const breaker of this.#hosts.values()) breaker.close();
    for (const models of this.#replicas.values()) for (const breaker of models.values()) breaker.close();
  }

  #replica(host: string, model: string): Breaker {
    let models = this.#replicas.get(host);
    if (!models) this.#replicas.set(host, (models = new Map()));
    let breaker = models.get(model);
    if (!breaker) models.set(model, (breaker = new Breaker(this.#deps.clock, this.#deps.policies.replica, (change) => this.#emit({ ...change, host, model }))));
    return breaker;
  }

  #host(host: string): Breaker {
    let breaker = this.#hosts.get(host);
    if (!breaker) this.#hosts.set(host, (breaker = new Breaker(this.#deps.clock, this.#deps.policies.host, (change) => this.#emit({ ...change, host, model: null }))));
    return breaker;
  }

  #emit(change: BreakerChange): void {
    for (const listener of this.#listeners) listener(change);
  }
}
