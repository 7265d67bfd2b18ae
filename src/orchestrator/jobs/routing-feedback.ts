import type { AttemptObserver, AttemptOutcome } from './states.js';
import type { RegisteredModel } from '../registry/index.js';
import type { BreakerBoard } from '../routing/breakers.js';
import type { HealthBook } from '../routing/health.js';
import type { ThroughputBook } from '../routing/throughput.js';
import { keepNewest } from '../../protocol/bounded.js';

/** Batches remembered as counted (a batch's jobs report one by one; the batch counts once). */
const COUNTED_LIMIT = 4096;

export interface RoutingFeedbackDeps {
  breakers: BreakerBoard;
  throughput: ThroughputBook;
  health: HealthBook;
  model(name: string): RegisteredModel | undefined;
}

/**
 * What routing learns from attempts as they end. A batch counts once, by its
 * first result that counts: a success feeds the replica's throughput (batch
 * size, and its cost, ÷ compute time; jobs that share a batch cost the same,
 * so one job's input prices the batch), counts for its breakers and marks it healthy;
 * a failure that is not the input's fault counts against the replica's
 * breaker — not a server that was not ready (NOT_READY). Lost attempts are not counted here: the host's link breaker counts
 * the link going down, once, however many batches it held. Cancelled and
 * expired attempts say nothing about the replica.
 */
export class RoutingFeedback implements AttemptObserver {
  readonly #deps: RoutingFeedbackDeps;
  readonly #counted = new Set<string>();

  constructor(deps: RoutingFeedbackDeps) {
    this.#deps = deps;
  }

  ended(outcome: AttemptOutcome): void {
    const { host, batchId, job } = outcome;
    if (outcome.status === 'succeeded') {
      if (!this.#first(batchId)) return;
      const model = this.#deps.model(job.model);
      if (outcome.computeMs !== null && model) {
        this.#deps.throughput.sample(host, job.model, { jobs: outcome.batchSize, cost: outcome.batchSize * model.jobInputs.cost(job.input), computeMs: outcome.computeMs });
      }
      this.#deps.health.succeeded(host, job.model);
      this.#deps.breakers.success(host, job.model);
      return;
    }
    if (outcome.status !== 'failed' || !outcome.retryable || !this.#first(batchId)) return;
    // The orchestrator's own bucket not answering is no fault of the replica: counting it would open every breaker
    // during an outage and keep work off healthy hosts after the bucket is back.
    if (outcome.error?.code === 'BLOB_STORE_UNAVAILABLE') return;
    // A host that handed work back because its owner came, its hours ended or it ran hot did nothing wrong either.
    if (outcome.error?.code === 'HOST_AWAY') return;
    // Nor did one whose server was not ready (starting, restarting, busy): the engine held the jobs through its
    // readiness window first, and a server that stays away fails them ENGINE_UNREACHABLE, which counts.
    if (outcome.error?.code === 'NOT_READY') return;
    this.#deps.breakers.failure(host, job.model, outcome.error ? `${outcome.error.code}: ${outcome.error.message}` : 'failed');
  }

  #first(batchId: string): boolean {
    if (this.#counted.has(batchId)) return false;
    this.#counted.add(batchId);
    keepNewest(this.#counted, COUNTED_LIMIT);
    return true;
  }
}
