import { MeshError } from '../../protocol/index.js';
import type { Clock, Timer } from '../../protocol/clock.js';
import type { JobRecord } from '../store/index.js';
import type { Dispatcher } from './dispatcher.js';
import type { InFlight } from './in-flight.js';
import type { JobStates } from './states.js';

export interface CancellationDeps {
  clock: Clock;
  states: JobStates;
  inFlight: InFlight;
  dispatcher: Dispatcher;
}

/**
 * Deadlines and cancellation: one timer per job with a deadline, so a job
 * expires at its moment whatever the replicas are doing; and the way a job
 * ends early, wherever it is — out of its queue, or stopped on its host.
 */
export class Cancellation {
  readonly #deps: CancellationDeps;
  readonly #timers = new Map<string, Timer>();

  constructor(deps: CancellationDeps) {
    this.#deps = deps;
    deps.states.onTerminal((job) => this.#clear(job.id));
  }

  /** Arm the job's deadline, if it has one. */
  arm(job: JobRecord): void {
    if (job.deadlineAt === null) return;
    this.#clear(job.id);
    this.#armUntil(job.id, job.deadlineAt);
  }

  /** Cancel a job that has not finished; false if it already had. */
  cancel(jobId: string): boolean {
    return this.#end(jobId, 'cancelled');
  }

  /** The job's deadline passed: it ends now, wherever it is. */
  expire(jobId: string): boolean {
    return this.#end(jobId, 'expired', new MeshError('DEADLINE_EXCEEDED'));
  }

  close(): void {
    for (const timer of this.#timers.values()) timer.cancel();
    this.#timers.clear();
  }

  #end(jobId: string, status: 'cancelled' | 'expired', error?: MeshError): boolean {
    const job = this.#deps.states.active(jobId);
    if (!job) return false;
    // Where it runs must be read before the job ends: ending it forgets its placement.
    const placement = this.#deps.inFlight.of(jobId);
    if (placement) this.#deps.dispatcher.cancelOnHost(jobId);
    return this.#deps.states.ended(job, status, error, placement?.batch.id);
  }

  #armUntil(jobId: string, deadlineAt: number): void {
    this.#timers.set(jobId, this.#deps.clock.setTimer(deadlineAt - this.#deps.clock.now(), () => {
      this.#timers.delete(jobId);
      // Node's timers run on the loop's cached monotonic time, which can be a
      // millisecond ahead of the wall clock: a job never ends before its deadline.
      if (this.#deps.clock.now() < deadlineAt) this.#armUntil(jobId, deadlineAt);
      else this.expire(jobId);
    }));
  }

  #clear(jobId: string): void {
    this.#timers.get(jobId)?.cancel();
    this.#timers.delete(jobId);
  }
}
