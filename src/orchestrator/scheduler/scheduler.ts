import type { Clock, Timer } from '../clock.js';
import type { RegisteredModel } from '../registry/index.js';
import type { HostSession } from '../routing/index.js';
import { releaseDecision } from './batcher.js';
import { compareJobs, ModelQueue, type QueuedJob } from './queue.js';

export interface SchedulerDeps {
  clock: Clock;
  model(name: string): RegisteredModel | undefined;
  /** A host with a free slot for this model and these classes, or null. */
  pickHost(model: RegisteredModel, classes: readonly string[]): HostSession | null;
  /** Hand a released batch to the dispatcher. */
  dispatch(model: RegisteredModel, jobs: QueuedJob[], host: HostSession): void;
  /** The most jobs like `job` whose batch fits `host`'s memory (MemoryPlanner.batchCap); no cap when absent. */
  batchCap?(model: RegisteredModel, job: QueuedJob, host: HostSession): number;
  agingMs: number;
}

interface Ready {
  model: RegisteredModel;
  queue: ModelQueue;
  key: string;
  size: number;
  best: QueuedJob;
}

/**
 * Holds the queues and decides, whenever something changes, which batches to
 * release to which hosts. Work is released globally in priority order across
 * models, so one busy model cannot starve another's higher-priority jobs.
 */
export class Scheduler {
  readonly #deps: SchedulerDeps;
  readonly #queues = new Map<string, ModelQueue>();
  #total = 0;
  #pumpQueued = false;
  #wake: { at: number; timer: Timer } | null = null;

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

  has(model: string, id: string): boolean {
    return this.#queues.get(model)?.has(id) ?? false;
  }

  enqueue(job: QueuedJob): void {
    let queue = this.#queues.get(job.model);
    if (!queue) this.#queues.set(job.model, (queue = new ModelQueue()));
    queue.push(job);
    this.#total++;
    this.requestPump();
  }

  /** Take a job out of its queue (cancelled or expired); false if it was not queued. */
  remove(model: string, id: string): boolean {
    const removed = this.#queues.get(model)?.remove(id);
    if (removed) this.#total--;
    return removed !== undefined;
  }

  /** Coalesce many triggers (arrivals, freed slots) into one pass after the current tick's work. */
  requestPump(): void {
    if (this.#pumpQueued) return;
    this.#pumpQueued = true;
    queueMicrotask(() => {
      this.#pumpQueued = false;
      this.pump();
    });
  }

  /** Release every batch that is ready and has a host, best job first. */
  pump(): void {
    const now = this.#deps.clock.now();
    let wakeAt = Infinity;
    for (;;) {
      const ready: Ready[] = [];
      wakeAt = Infinity;
      for (const [name, queue] of this.#queues) {
        if (queue.size === 0) continue;
        const model = this.#deps.model(name);
        if (!model) continue;
        for (const group of queue.groups(now, this.#deps.agingMs)) {
          const decision = releaseDecision(group.size, group.oldestAt, now, model.policy.batching);
          if (decision.release) ready.push({ model, queue, key: group.key, size: decision.size, best: group.best });
          else wakeAt = Math.min(wakeAt, decision.wakeAt);
        }
      }
      ready.sort((a, b) => compareJobs(a.best, b.best, now, this.#deps.agingMs));
      let released = false;
      for (const candidate of ready) {
        const host = this.#deps.pickHost(candidate.model, candidate.best.classes);
        if (!host) continue;
        const size = Math.min(candidate.size, this.#deps.batchCap?.(candidate.model, candidate.best, host) ?? Infinity);
        const jobs = candidate.queue.take(candidate.key, size, now, this.#deps.agingMs);
        this.#total -= jobs.length;
        this.#deps.dispatch(candidate.model, jobs, host);
        released = true;
        break;
      }
      if (!released) break;
    }
    this.#armWake(wakeAt);
  }

  #armWake(at: number): void {
    if (this.#wake && this.#wake.at <= at && this.#wake.at > this.#deps.clock.now()) return;
    this.#wake?.timer.cancel();
    this.#wake = null;
    if (at === Infinity) return;
    const timer = this.#deps.clock.setTimer(at - this.#deps.clock.now(), () => {
      this.#wake = null;
      this.pump();
    });
    this.#wake = { at, timer };
  }

  /** Every queued job (for status and shutdown). */
  *queued(): Generator<QueuedJob> {
    for (const queue of this.#queues.values()) yield* queue.jobs();
  }
}
