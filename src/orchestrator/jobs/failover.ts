import type { Logger } from 'pino';
import { MeshError, type ErrorBody } from '../../protocol/index.js';
import type { Clock, Timer } from '../../protocol/clock.js';
import type { RegisteredModel } from '../registry/index.js';
import type { HostSession } from '../routing/index.js';
import type { JobRecord } from '../store/index.js';
import type { Dispatcher } from './dispatcher.js';
import type { InFlight } from './in-flight.js';
import type { JobStates } from './states.js';
import { backoffDelay } from '../../net/backoff.js';

export interface FailoverDeps {
  clock: Clock;
  states: JobStates;
  inFlight: InFlight;
  dispatcher: Dispatcher;
  log: Logger;
  model(name: string): RegisteredModel | undefined;
  /** Backoff before the first retry; doubles with each attempt. */
  retryBackoffMs: number;
}

/** A job a reconnecting session of the same host says it still holds. */
export interface Held {
  jobId: string;
  batchId: string;
}

/**
 * What happens when an attempt fails or its host goes away: the attempt is
 * recorded as failed or lost, and the job goes back to its queue after an
 * exponential backoff if the error may be another replica's to fix and the
 * model's retries allow — otherwise the job fails.
 */
export class Failover {
  readonly #deps: FailoverDeps;
  /** Jobs waiting out their backoff before going back in the queue, and when they go back. */
  readonly #retrying = new Map<string, { timer: Timer; at: number }>();
  /** Hosts where each job's attempts failed: its retries go elsewhere when they can. */
  readonly #failedOn = new Map<string, string[]>();

  constructor(deps: FailoverDeps) {
    this.#deps = deps;
    deps.states.onTerminal((job) => {
      this.#retrying.get(job.id)?.timer.cancel();
      this.#retrying.delete(job.id);
      this.#failedOn.delete(job.id);
    });
  }

  /** Hosts where attempts of the job failed (its retries go elsewhere when they can). */
  failedOn(jobId: string): readonly string[] {
    return this.#failedOn.get(jobId) ?? [];
  }

  /** When a job waiting out its retry backoff goes back in its queue; null if it is not waiting. */
  retryAt(jobId: string): number | null {
    return this.#retrying.get(jobId)?.at ?? null;
  }

  /** The attempt of `job` in `batchId` failed (`failed`) or vanished with its host (`lost`). */
  attemptFailed(job: JobRecord, batchId: string, status: 'failed' | 'lost', error: ErrorBody, retryable: boolean): void {
    const { states, inFlight, clock, log } = this.#deps;
    const host = job.batchId === batchId ? job.leaseHost : null;
    states.attemptEnded(job, batchId, status, error, retryable);
    inFlight.release(job.id);
    if (job.status !== 'dispatched' && job.status !== 'running') return;
    const retries = this.#deps.model(job.model)?.policy.retries ?? 0;
    // Handed back by a host that stopped taking work (its owner came, its hours ended): not a failure of the job, so
    // it uses none of its retries and waits no backoff.
    const handedBack = error.code === 'HOST_AWAY';
    if (retryable && (handedBack || job.attempts <= retries) && states.requeued(job)) {
      if (host) this.#failedOn.set(job.id, [...new Set([...this.failedOn(job.id), host])]);
      const backoff = handedBack ? 0 : backoffDelay({ initialMs: this.#deps.retryBackoffMs, maxMs: Number.MAX_SAFE_INTEGER }, job.attempts);
      log.info({ jobId: job.id, attempt: job.attempts, backoff, error }, 'retrying job');
      this.#retrying.set(job.id, {
        at: clock.now() + backoff,
        timer: clock.setTimer(backoff, () => {
          this.#retrying.delete(job.id);
          if (job.status === 'queued') this.#deps.dispatcher.enqueue(job, this.failedOn(job.id));
        }),
      });
      return;
    }
    const final = retryable && job.attempts > 1
      ? new MeshError('RETRIES_EXHAUSTED', { attempts: job.attempts, detail: error.message }).toJSON()
      : error;
    states.ended(job, 'failed', final);
  }

  /**
   * A host session ended: every job it held fails this attempt — except those
   * a new session of the same host says it still holds, which move to it.
   */
  hostLost(host: HostSession, successor?: { session: HostSession; held: readonly Held[] }): void {
    const kept = new Set(successor?.held.map((entry) => `${entry.batchId}/${entry.jobId}`));
    for (const { jobId, batch } of this.#deps.inFlight.jobsOf(host)) {
      if (successor && kept.has(`${batch.id}/${jobId}`)) {
        this.#deps.inFlight.move(jobId, successor.session, batch.id, batch.model, batch.dispatchedAt);
        continue;
      }
      const job = this.#deps.states.active(jobId);
      if (job) this.attemptFailed(job, batch.id, 'lost', new MeshError('AGENT_LOST', { host: host.id }).toJSON(), true);
    }
    host.batches.clear();
  }

  close(): void {
    for (const { timer } of this.#retrying.values()) timer.cancel();
    this.#retrying.clear();
  }
}
