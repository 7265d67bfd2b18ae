import type { RegisteredModel } from '../registry/index.js';
import type { HostSession } from '../routing/index.js';
import { ArrivalRate } from './arrivals.js';
import { releaseDecision, worthWaiting } from './batcher.js';
import { compareRanks, effectivePriority, ModelQueue, type QueuedJob, type Rank } from './queue.js';
import type { ReadyModels, SwapHold, SwapPolicy } from './swap-policy.js';

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
  /** Whether a batch that would swap a host's model out waits for the batches ready for that model (swap-policy.ts); none: it never waits. */
  swaps?: SwapPolicy;
}

type Candidate = { model: RegisteredModel; queue: ModelQueue; key: string; size: number; best: QueuedJob; rank: Rank; early: boolean };

/** A batch taken out of its queue, with the host that will run it. */
export interface Release {
  model: RegisteredModel;
  jobs: QueuedJob[];
  host: HostSession;
}

/** A host with a free slot for this model and this job (its classes and hosts), or null. */
export type PickHost = (model: RegisteredModel, job: QueuedJob) => HostSession | null;

/** Where a queued job stands in its model's queue, for explaining why it waits. */
export interface Standing {
  /** Jobs of its model that leave before it (better effective priority, or as good and an earlier turn, or as early and older). */
  ahead: number;
  queued: number;
  /** Its compatibility group: the jobs that may share its batch. */
  group: { size: number; target: number };
  /** Whether the group may leave now (full, a preferred size, waited long enough, or let out early on an idle replica). */
  ready: boolean;
  /** Ready only because nothing more is arriving: it leaves early, but only for a replica with nothing to do. */
  early: boolean;
  /** When it leaves regardless (its oldest job has waited maxQueueDelayMs); null when it is ready by size or delay. */
  releaseAt: number | null;
}

/**
 * The queues and the decision of what leaves them next. Work is released
 * globally in priority order across models, so one busy model cannot starve
 * another's higher-priority jobs, and within a priority in turns between grant
 * lineages (ModelQueue), so one person's burst cannot starve another's single
 * job. It keeps no timers and sends nothing: the
 * dispatcher asks it for the next batch whenever something changed, and
 * when to ask again.
 */
export class Scheduler {
  readonly #deps: SchedulerDeps;
  readonly #queues = new Map<string, ModelQueue>();
  readonly #arrivals = new Map<string, ArrivalRate>();
  /** Jobs waiting per grant lineage, across models (a `max-queued` cap is checked against it). */
  readonly #byLineage = new Map<string, number>();
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

  /** Jobs of a grant lineage waiting in the queues now. */
  queuedOf(lineage: string): number {
    return this.#byLineage.get(lineage) ?? 0;
  }

  depths(): Record<string, number> {
    return Object.fromEntries([...this.#queues].map(([model, queue]) => [model, queue.size]));
  }

  enqueue(job: QueuedJob): void {
    let queue = this.#queues.get(job.model);
    if (!queue) this.#queues.set(job.model, (queue = new ModelQueue()));
    queue.push(job);
    this.#total++;
    if (job.lineage !== undefined) this.#byLineage.set(job.lineage, (this.#byLineage.get(job.lineage) ?? 0) + 1);
    let arrivals = this.#arrivals.get(job.model);
    if (!arrivals) this.#arrivals.set(job.model, (arrivals = new ArrivalRate()));
    arrivals.arrived(job.enqueuedAt);
  }

  /** Take a job out of its queue (cancelled or expired); false if it was not queued. */
  remove(model: string, id: string): boolean {
    const removed = this.#queues.get(model)?.remove(id);
    if (removed) this.#left(removed);
    return removed !== undefined;
  }

  /**
   * The best batch that is ready and that some host can take now, taken out of
   * its queue — or, when there is none, the moment a waiting group becomes
   * ready by itself (Infinity: only an arrival or a freed host can change anything).
   */
  next(now: number, pickHost: PickHost): { release: Release } | { wakeAt: number } {
    const { agingMs } = this.#deps;
    const { ready, wakeAt: readyAt } = this.#ready(now);
    let wakeAt = readyAt;
    const levels = this.#deps.swaps ? readyLevels(ready) : null;
    for (const candidate of ready) {
      const host = pickHost(candidate.model, candidate.best);
      // A group let out early goes only to a replica with nothing to do: on a busy one it may as well wait for company.
      if (!host || (candidate.early && host.computing > 0)) continue;
      // A batch that would swap the host's model out while that model has batches ready waits for them (bounded).
      const held = levels && this.#deps.swaps!.hold(candidate.model, candidate.rank.level, host, now, levels);
      if (held) {
        wakeAt = Math.min(wakeAt, held.until);
        continue;
      }
      const size = Math.min(candidate.size, this.#deps.batchCap?.(candidate.model, candidate.best, host) ?? Infinity);
      const jobs = candidate.queue.take(candidate.key, size, now, agingMs);
      for (const job of jobs) this.#left(job);
      this.#deps.swaps?.released(candidate.model.manifest.name, host, now);
      return { release: { model: candidate.model, jobs, host } };
    }
    return { wakeAt };
  }

  /** A job left its queue (taken in a batch, cancelled, expired). */
  #left(job: QueuedJob): void {
    this.#total--;
    if (job.lineage === undefined) return;
    const count = (this.#byLineage.get(job.lineage) ?? 1) - 1;
    if (count > 0) this.#byLineage.set(job.lineage, count);
    else this.#byLineage.delete(job.lineage);
  }

  /**
   * Whether a queued job's batch would wait for a model swap on `host` (the host it would be routed to now), and
   * until when at most: for explaining a job; starts no hold.
   */
  swapHold(model: string, id: string, host: HostSession, now: number): SwapHold | null {
    const registered = this.#deps.model(model);
    const job = this.#queues.get(model)?.get(id);
    if (!this.#deps.swaps || !registered || !job) return null;
    const { ready } = this.#ready(now);
    return this.#deps.swaps.hold(registered, effectivePriority(job, now, this.#deps.agingMs), host, now, readyLevels(ready), false);
  }

  /** The groups that may leave now, best first, and when the next waiting one becomes ready by itself. */
  #ready(now: number): { ready: Candidate[]; wakeAt: number } {
    const { agingMs } = this.#deps;
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
          ready.push({ model, queue, key: group.key, size: decision.size, best: group.best, rank: group.rank, early: false });
          continue;
        }
        wakeAt = Math.min(wakeAt, decision.wakeAt);
        const expected = this.#arrivals.get(name)?.expectedWithin(decision.wakeAt - now, now) ?? 0;
        if (this.#deps.holdPartialBatches !== 'always' && !worthWaiting(group.size, batching, expected)) {
          ready.push({ model, queue, key: group.key, size: group.size, best: group.best, rank: group.rank, early: true });
        }
      }
    }
    ready.sort((a, b) => compareRanks(a.rank, b.rank));
    return { ready, wakeAt };
  }

  /** Where a queued job stands; null when it is not in a queue (waiting out a retry backoff, or not queued). */
  standing(model: string, id: string, now: number): Standing | null {
    const queue = this.#queues.get(model);
    const job = queue?.get(id);
    const registered = this.#deps.model(model);
    if (!queue || !job || !registered) return null;
    const { agingMs } = this.#deps;
    const ahead = queue.ahead(job, now, agingMs);
    const batching = registered.policy.batching;
    const group = queue.groups(now, agingMs).find((entry) => entry.key === job.compatKey)!;
    const target = Math.min(batching.maxBatchSize, ...batching.preferredBatchSizes.filter((size) => size >= group.size));
    const decision = releaseDecision(group.size, group.oldestAt, now, batching);
    const early = !decision.release && this.#deps.holdPartialBatches !== 'always'
      && !worthWaiting(group.size, batching, this.#arrivals.get(model)?.expectedWithin(decision.wakeAt - now, now) ?? 0);
    return {
      ahead, queued: queue.size, group: { size: group.size, target },
      ready: decision.release || early, early, releaseAt: decision.release ? null : decision.wakeAt,
    };
  }
}

/** Each model with a batch ready, and the best effective priority level among them. */
function readyLevels(ready: readonly Candidate[]): ReadyModels {
  const levels = new Map<string, number>();
  for (const candidate of ready) {
    const name = candidate.model.manifest.name;
    const level = candidate.rank.level;
    levels.set(name, Math.min(level, levels.get(name) ?? Infinity));
  }
  return levels;
}
