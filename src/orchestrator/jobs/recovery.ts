import type { Logger } from 'pino';
import { MeshError } from '../../protocol/index.js';
import type { Clock, Timer } from '../../protocol/clock.js';
import type { HostSession } from '../routing/index.js';
import type { Cancellation } from './cancellation.js';
import type { Dispatcher } from './dispatcher.js';
import type { Held } from './failover.js';
import type { InFlight } from './in-flight.js';
import type { JobSources } from './sources.js';
import type { JobStates } from './states.js';

export interface RecoveryDeps {
  clock: Clock;
  states: JobStates;
  inFlight: InFlight;
  dispatcher: Dispatcher;
  cancellation: Cancellation;
  /** Waiting jobs wait for their sources again. */
  sources: Pick<JobSources, 'watch'>;
  log: Logger;
  /** How long a job dispatched before a restart waits for its agent to reconnect and claim it. */
  reconnectGraceMs: number;
}

/**
 * Picking up after a restart. Queued jobs go back in their queues at once; waiting ones wait for their sources again
 * (settled at once where a source ended meanwhile).
 * Jobs that were out on a host wait `reconnectGraceMs` for that host's agent
 * to reconnect and claim them (its hello lists what it still holds); nobody
 * claims them, they are requeued.
 */
export class Recovery {
  readonly #deps: RecoveryDeps;
  readonly #orphans = new Map<string, { host: string | null; batchId: string | null; timer: Timer }>();

  constructor(deps: RecoveryDeps) {
    this.#deps = deps;
    deps.states.onTerminal((job) => {
      this.#orphans.get(job.id)?.timer.cancel();
      this.#orphans.delete(job.id);
    });
  }

  async recover(): Promise<{ queued: number; orphaned: number; waiting: number }> {
    const { states, clock, cancellation, dispatcher } = this.#deps;
    const now = clock.now();
    let queued = 0;
    let orphaned = 0;
    const waiting = [];
    for (const job of await states.restore()) {
      if (job.deadlineAt !== null && job.deadlineAt <= now) {
        cancellation.expire(job.id);
        continue;
      }
      cancellation.arm(job);
      if (job.status === 'queued') {
        dispatcher.enqueue(job);
        queued++;
        continue;
      }
      if (job.status === 'waiting') {
        waiting.push(job);
        continue;
      }
      const timer = clock.setTimer(this.#deps.reconnectGraceMs, () => this.#reclaim(job.id));
      this.#orphans.set(job.id, { host: job.leaseHost, batchId: job.batchId, timer });
      orphaned++;
    }
    // After every job is restored, so a source restored after its dependent is known to be unfinished.
    for (const job of waiting) this.#deps.sources.watch(job);
    return { queued, orphaned, waiting: waiting.length };
  }

  /** A reconnected agent says it still holds these jobs: those it was given stay with it. */
  claim(host: HostSession, held: readonly Held[]): void {
    for (const { jobId, batchId } of held) {
      const orphan = this.#orphans.get(jobId);
      if (!orphan || orphan.host !== host.id || orphan.batchId !== batchId) continue;
      orphan.timer.cancel();
      this.#orphans.delete(jobId);
      const job = this.#deps.states.active(jobId);
      if (job) this.#deps.inFlight.move(jobId, host, batchId, job.model, job.updatedAt);
    }
  }

  close(): void {
    for (const orphan of this.#orphans.values()) orphan.timer.cancel();
    this.#orphans.clear();
  }

  #reclaim(jobId: string): void {
    const orphan = this.#orphans.get(jobId);
    this.#orphans.delete(jobId);
    const { states, dispatcher, log } = this.#deps;
    const job = states.active(jobId);
    if (!job || (job.status !== 'dispatched' && job.status !== 'running')) return;
    if (orphan?.batchId) {
      states.attemptEnded(job, orphan.batchId, 'lost', new MeshError('AGENT_LOST', { host: `${orphan.host ?? '?'} (not reclaimed after a restart)` }).toJSON());
    }
    if (!states.requeued(job)) return;
    log.info({ jobId, host: orphan?.host }, 'requeued a job nobody reclaimed');
    dispatcher.enqueue(job);
  }
}
