import type { RegisteredModel } from '../registry/index.js';
import type { HostSession } from '../routing/index.js';
import { ArrivalRate } from './arrivals.js';
import { releaseDecision, worthWaiting } from './batcher.js';
import { compareJobs, ModelQueue, type QueuedJob } from './queue.js';

export interface SchedulerDeps {
  model(name: string): RegisteredModel | undefined;
  /** A queued job moves up one priority level for each `agingMs` it waits. */
  agingMs: number;
  /**
   * Hold a partial batch on an idle replica only while arrivals promise company (default), or always for the
   * full `maxQueueDelayMs` (the rule before work conservation; kept to compare the two in bench/batching-policy).
   */
  holdPartialBatches?: 'while-arriving' | 'always';
  /** The most jobs like `job` whose batch fits `host`'s memory (MemoryPlanner.batchCap); no cap when absent. */
  batchCap?(model: RegisteredModel, job: QueuedJob, host: HostSession): number;
}

/** A batch taken out of its queue, with the host that will run it. */
export interface Release {
  model: RegisteredModel;
  jobs: QueuedJob[];
  host: HostSession;
}

/** A host with a free slot for this model and these classes, or null. */
export type PickHost = (model: RegisteredModel, classes: readonly string[]) => HostSession | null;

/**
 * The queues and the decision of what leaves them next. Work is released
 * globally in priority order across models, so one busy model cannot starve
 * another's higher-priority jobs. It keeps no timers and sends nothing: the
 * dispatcher asks it for the next batch whenever something changed, and
 * when to ask again.
 */
export class Scheduler {
  readonly #deps: SchedulerDeps;
  readonly #queues = new Map<string, ModelQueue>();
  readonly #arrivals = new Map<string, ArrivalRate>();
  #total = 0;

  constructor(deps: SchedulerDeps) {
    this.#deps = deps;
  }

  get totalDepth(): number {
    return this.#total;
  }

  depth(model: string): number {
    return this.#queues.get(model)?.size ?? 0;
  }

  depths(): Record<string, number> {
    return Object.fromEntries([...this.#queues].map(([model, queue]) => [model, queue.size]));
  }

  enqueue(job: QueuedJob): void {
    let queue = this.#queues.get(job.model);
    if (!queue) this.#queues.set(job.model, (queue = new ModelQueue()));
    queue.push(job);
    this.#total++;
    let arrivals = this.#arrivals.get(job.model);
    if (!arrivals) this.#arrivals.set(job.model, (arrivals = new ArrivalRate()));
    arrivals.arrived(job.enqueuedAt);
  }

  /** Take a job out of its queue (cancelled or expired); false if it was not queued. */
  remove(model: string, id: string): boolean {
    const removed = this.#queues.get(model)?.remove(id);
    if (removed) this.#total--;
    return removed !== undefined;
  }

  /**
   * The best batch that is ready and that some host can take now, taken out of
   * its queue — or, when there is none, the moment a waiting group becomes
   * ready by itself (Infinity: only an arrival or a freed host can change anything).
   */
  next(now: number, pickHost: PickHost): { release: Release } | { wakeAt: number } {
    const { agingMs } = this.#deps;
    type Candidate = { model: RegisteredModel; queue: ModelQueue; key: string; size: number; best: QueuedJob; early: boolean };
    const ready: Candidate[] = [];
    let wakeAt = Infinity;
    for (const [name, queue] of this.#queues) {
      if (queue.size === 0) continue;
      const model = this.#deps.model(name);
      if (!model) continue;
      const batching = model.policy.batching;
      for (const group of queue.groups(now, agingMs)) {
        const decision = releaseDecision(group.size, group.oldestAt, now, batching);
        if (decision.release) {
          ready.push({ model, queue, key: group.key, size: decision.size, best: group.best, early: false });
          continue;
        }
        wakeAt = Math.min(wakeAt, decision.wakeAt);
        const expected = this.#arrivals.get(name)?.expectedWithin(decision.wakeAt - now, now) ?? 0;
        if (this.#deps.holdPartialBatches !== 'always' && !worthWaiting(group.size, batching, expected)) {
          ready.push({ model, queue, key: group.key, size: group.size, best: group.best, early: true });
        }
      }
    }
    ready.sort((a, b) => compareJobs(a.best, b.best, now, agingMs));
    for (const candidate of ready) {
      const host = pickHost(candidate.model, candidate.best.classes);
      // A group let out early goes only to a replica with nothing to do: on a busy one it may as well wait for company.
      if (!host || (candidate.early && host.batches.size > 0)) continue;
      const size = Math.min(candidate.size, this.#deps.batchCap?.(candidate.model, candidate.best, host) ?? Infinity);
      const jobs = candidate.queue.take(candidate.key, size, now, agingMs);
      this.#total -= jobs.length;
      return { release: { model: candidate.model, jobs, host } };
    }
    return { wakeAt };
  }
}
