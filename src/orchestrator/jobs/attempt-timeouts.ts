import type { Logger } from 'pino';
import { MeshError } from '../../protocol/index.js';
import type { Clock } from '../../protocol/clock.js';
import { Deadlines } from './deadlines.js';
import type { MeshMetrics } from '../metrics/mesh-metrics.js';
import type { RegisteredModel } from '../registry/index.js';
import type { AttemptBudgets, Budget, HostRegistry } from '../routing/index.js';
import type { JobRecord } from '../store/index.js';
import type { Dispatcher } from './dispatcher.js';
import type { Failover } from './failover.js';
import type { InFlight } from './in-flight.js';
import type { AttemptObserver, AttemptOutcome, AttemptPlace, JobStates } from './states.js';

export interface AttemptTimeoutsDeps {
  clock: Clock;
  states: JobStates;
  inFlight: InFlight;
  failover: Failover;
  dispatcher: Dispatcher;
  hosts: HostRegistry;
  budgets: AttemptBudgets;
  metrics: MeshMetrics;
  log: Logger;
  model(name: string): RegisteredModel | undefined;
}

interface Watched {
  host: string;
  model: RegisteredModel;
  /** Its jobs whose attempt has not ended. */
  jobIds: Set<string>;
  /** The cost of one of its jobs (jobs that share a batch cost the same). */
  jobCost: number;
  /** The budget its deadline was set from (reported when it is reached). */
  budget: Budget | null;
}

/**
 * A deadline on each batch in flight, derived from how fast the replica has
 * been (`AttemptBudgets`): a host that answers heartbeats but stalls real
 * work is caught. Armed when the batch is sent (with time to load the model
 * if it was not resident), re-armed when the host says it started. When it
 * fires, the host is told to cancel the batch's jobs and their attempts fail
 * with AGENT_TIMEOUT, retryable, so they fail over and the replica's breaker
 * counts the failure.
 */
export class AttemptTimeouts implements AttemptObserver {
  readonly #deps: AttemptTimeoutsDeps;
  readonly #batches = new Map<string, Watched>();
  /** One timer for every batch's deadline: nearly every batch ends long before its own. */
  readonly #deadlines: Deadlines<string>;

  constructor(deps: AttemptTimeoutsDeps) {
    this.#deps = deps;
    this.#deadlines = new Deadlines(deps.clock, (batchId) => this.#expire(batchId));
    deps.states.observeAttempts(this);
  }

  dispatched(jobs: readonly JobRecord[], place: AttemptPlace): void {
    const model = this.#deps.model(jobs[0]!.model);
    if (!model) return;
    const resident = this.#deps.hosts.get(place.host)?.isResident(model.manifest.name) ?? false;
    const jobCost = model.jobInputs.cost(jobs[0]!.input);
    const watched: Watched = { host: place.host, model, jobIds: new Set(jobs.map((job) => job.id)), jobCost, budget: null };
    this.#batches.set(place.batchId, watched);
    this.#arm(place.batchId, watched, this.#deps.budgets.start(place.host, model, this.#work(watched), resident));
  }

  started(batchId: string): void {
    const watched = this.#batches.get(batchId);
    if (watched) this.#arm(batchId, watched, this.#deps.budgets.run(watched.host, watched.model, this.#work(watched)));
  }

  #work(watched: Watched): { jobs: number; cost: number } {
    return { jobs: watched.jobIds.size, cost: watched.jobIds.size * watched.jobCost };
  }

  ended(outcome: AttemptOutcome): void {
    const watched = this.#batches.get(outcome.batchId);
    if (!watched) return;
    watched.jobIds.delete(outcome.job.id);
    if (watched.jobIds.size > 0) return;
    this.#deadlines.delete(outcome.batchId);
    this.#batches.delete(outcome.batchId);
  }

  close(): void {
    this.#deadlines.close();
    this.#batches.clear();
  }

  #arm(batchId: string, watched: Watched, budget: Budget): void {
    watched.budget = budget;
    this.#deadlines.set(batchId, this.#deps.clock.now() + budget.ms);
  }

  #expire(batchId: string): void {
    const watched = this.#batches.get(batchId);
    const budget = watched?.budget;
    if (!watched || !budget) return;
    this.#batches.delete(batchId);
    const { states, inFlight, dispatcher, failover, log, metrics } = this.#deps;
    const error = new MeshError('AGENT_TIMEOUT', { host: watched.host, budgetMs: budget.ms, basis: budget.basis }).toJSON();
    log.warn({ host: watched.host, model: watched.model.manifest.name, batchId, jobs: watched.jobIds.size, budgetMs: budget.ms }, 'a batch outlived its attempt timeout');
    metrics.attemptTimedOut(watched.host, watched.model.manifest.name);
    for (const jobId of watched.jobIds) {
      const job = states.active(jobId);
      if (!job || job.batchId !== batchId || (job.status !== 'dispatched' && job.status !== 'running')) continue;
      // Where it runs must be read before the attempt fails: failing it forgets the placement.
      if (inFlight.of(jobId)?.batch.id === batchId) dispatcher.cancelOnHost(jobId);
      failover.attemptFailed(job, batchId, 'failed', error, true);
    }
  }
}
