/** A job waiting in its model's queue. */
export interface QueuedJob {
  id: string;
  seq: number;
  model: string;
  priority: number;
  enqueuedAt: number;
  /** Jobs share a batch only when these are equal (shape parameters and allowed classes). */
  compatKey: string;
  /** Host classes this job may run on, in order of preference. */
  classes: readonly string[];
  /** The job's input (the memory planner sizes batches by it). */
  input?: Record<string, unknown>;
  /** Hosts its grant allows; null or absent: any. */
  hosts?: readonly string[] | null;
  /** Hosts where an earlier attempt failed (a retry goes elsewhere when it can). */
  avoid?: readonly string[];
}

/**
 * Effective priority: a job climbs one level for every `agingMs` it waits, up to
 * level 1, so a low-priority job is never starved by a steady stream of higher ones.
 */
export function effectivePriority(job: QueuedJob, now: number, agingMs: number): number {
  return Math.max(1, job.priority - Math.floor((now - job.enqueuedAt) / agingMs));
}

/** Negative when `a` should run before `b`: effective priority first, then arrival order. */
export function compareJobs(a: QueuedJob, b: QueuedJob, now: number, agingMs: number): number {
  return effectivePriority(a, now, agingMs) - effectivePriority(b, now, agingMs) || a.seq - b.seq;
}

/**
 * One model's queue: jobs grouped by compatibility key, and within a group by
 * priority level, each level first-in first-out. The best job of a group is
 * always the head of one of its levels, because within a level the oldest job
 * has aged the most.
 */
export class ModelQueue {
  readonly #groups = new Map<string, Map<number, Fifo>>();
  readonly #byId = new Map<string, QueuedJob>();

  get size(): number {
    return this.#byId.size;
  }

  get(id: string): QueuedJob | undefined {
    return this.#byId.get(id);
  }

  /** Every queued job, in no particular order (for explaining a job's place). */
  jobs(): IterableIterator<QueuedJob> {
    return this.#byId.values();
  }

  push(job: QueuedJob): void {
    let levels = this.#groups.get(job.compatKey);
    if (!levels) this.#groups.set(job.compatKey, (levels = new Map()));
    let fifo = levels.get(job.priority);
    if (!fifo) levels.set(job.priority, (fifo = new Fifo()));
    fifo.push(job);
    this.#byId.set(job.id, job);
  }

  remove(id: string): QueuedJob | undefined {
    const job = this.#byId.get(id);
    if (!job) return undefined;
    this.#byId.delete(id);
    const levels = this.#groups.get(job.compatKey)!;
    const fifo = levels.get(job.priority)!;
    fifo.delete(job);
    if (fifo.size === 0) levels.delete(job.priority);
    if (levels.size === 0) this.#groups.delete(job.compatKey);
    return job;
  }

  /** Each compatibility group: its size, its best job and its oldest arrival. */
  groups(now: number, agingMs: number): { key: string; size: number; best: QueuedJob; oldestAt: number }[] {
    const result = [];
    for (const [key, levels] of this.#groups) {
      let size = 0;
      let best: QueuedJob | undefined;
      let oldestAt = Infinity;
      for (const fifo of levels.values()) {
        size += fifo.size;
        const head = fifo.head()!;
        if (!best || compareJobs(head, best, now, agingMs) < 0) best = head;
        oldestAt = Math.min(oldestAt, head.enqueuedAt);
      }
      result.push({ key, size, best: best!, oldestAt });
    }
    return result;
  }

  /** Remove and return up to `count` jobs of one group, best first. */
  take(key: string, count: number, now: number, agingMs: number): QueuedJob[] {
    const levels = this.#groups.get(key);
    const taken: QueuedJob[] = [];
    while (levels && levels.size > 0 && taken.length < count) {
      let best: QueuedJob | undefined;
      for (const fifo of levels.values()) {
        const head = fifo.head()!;
        if (!best || compareJobs(head, best, now, agingMs) < 0) best = head;
      }
      this.remove(best!.id);
      taken.push(best!);
    }
    return taken;
  }
}

/**
 * One priority level of a group: first in, first out, with removal from
 * anywhere (a cancelled job). Not a Map: a Map's first entry is found by
 * walking past every entry deleted before it, which made each release cost
 * time in proportion to the jobs released before it (milliseconds with
 * 100,000 queued). Here removal leaves a hole the head skips once, and the
 * array is compacted when holes are most of it.
 */
class Fifo {
  #items: (QueuedJob | null)[] = [];
  #start = 0;
  readonly #positions = new Map<QueuedJob, number>();

  get size(): number {
    return this.#positions.size;
  }

  push(job: QueuedJob): void {
    this.#positions.set(job, this.#items.length);
    this.#items.push(job);
  }

  head(): QueuedJob | undefined {
    while (this.#start < this.#items.length && this.#items[this.#start] === null) this.#start++;
    return this.#items[this.#start] ?? undefined;
  }

  delete(job: QueuedJob): void {
    const position = this.#positions.get(job);
    if (position === undefined) return;
    this.#positions.delete(job);
    this.#items[position] = null;
    if (this.#positions.size === 0) {
      this.#items = [];
      this.#start = 0;
    } else if (this.#items.length > 64 && this.#positions.size < this.#items.length / 2) {
      this.#compact();
    }
  }

  #compact(): void {
    const items: QueuedJob[] = [];
    for (const item of this.#items) {
      if (item === null) continue;
      this.#positions.set(item, items.length);
      items.push(item);
    }
    this.#items = items;
    this.#start = 0;
  }
}
