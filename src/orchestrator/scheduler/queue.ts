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
  /**
   * The grant lineage it was submitted under: the id of the grant the orchestrator minted, which every grant narrowed
   * from it carries. The queue takes turns between lineages. Absent: the one line of jobs that name none.
   */
  lineage?: string;
  /** Set by its queue when it is queued: its turn among its level's lineages (ModelQueue). */
  turn?: number;
  /** Set by its queue when it is queued: since when its level has had work waiting, which is what it ages by. */
  agedFrom?: number;
}

/**
 * Effective priority: a job climbs one level for every `agingMs` its level of its model has had work waiting (since
 * `agedFrom`, set by its queue), up to level 1, so a low-priority job is never starved by a steady stream of higher
 * ones. A level ages as a whole, from when its queue last became non-empty, so jobs of one level never outrank each
 * other by age: their order is the lineages' turns (ModelQueue). Aging per job would let a burst that arrived earlier
 * climb a level ahead of a single job that came after it, and the single job would wait a whole `agingMs` behind it.
 */
export function effectivePriority(job: QueuedJob, now: number, agingMs: number): number {
  return Math.max(1, job.priority - Math.floor((now - (job.agedFrom ?? job.enqueuedAt)) / agingMs));
}

/**
 * Where a job stands among the queued jobs of every model: its effective level, then its lag (how many turns its
 * lineage is behind the front of its level, `turn - floor`), then arrival order. Lags compare across models and
 * levels because each counts from its own level's front.
 */
export interface Rank {
  level: number;
  lag: number;
  seq: number;
}

/** Negative when the job ranked `a` should run before the one ranked `b`. */
export function compareRanks(a: Rank, b: Rank): number {
  return a.level - b.level || a.lag - b.lag || a.seq - b.seq;
}

/** One priority level of a model's queue: since when it has had work, and each lineage's last turn and jobs waiting. */
interface LevelState {
  count: number;
  busySince: number;
  lineages: Map<string, { last: number; count: number }>;
}

/** The lineage of jobs that name none (jobs queued by the orchestrator's own tests and tools): one shared line. */
const NO_LINEAGE = '';

/**
 * One model's queue: jobs grouped by compatibility key, within a group by priority level, and within a level by grant
 * lineage, each lineage's jobs first-in first-out.
 *
 * Fairness between lineages is by turns (start-time fair queuing for jobs of equal cost): a job is given, when it is
 * queued, one turn after its lineage's last job still waiting at its level, or — when its lineage has none waiting —
 * the turn at the front of its level (the smallest turn waiting there). Within a level jobs leave in turn order, ties
 * to the older. So a lineage's 300th job waits behind the first jobs of every other lineage, and a lineage arriving
 * late starts at the front rather than behind everyone's backlog. With one lineage turns are arrival order, as FIFO.
 * The best job of a group is always the head of one of its lineages' FIFOs: within a FIFO turns only grow.
 */
export class ModelQueue {
  readonly #groups = new Map<string, Map<number, Map<string, Fifo>>>();
  readonly #byId = new Map<string, QueuedJob>();
  readonly #levels = new Map<number, LevelState>();

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
    const lineage = job.lineage ?? NO_LINEAGE;
    let state = this.#levels.get(job.priority);
    if (!state) this.#levels.set(job.priority, (state = { count: 0, busySince: job.enqueuedAt, lineages: new Map() }));
    if (state.count === 0) state.busySince = job.enqueuedAt;
    const mine = state.lineages.get(lineage);
    if (mine) {
      job.turn = ++mine.last;
      mine.count++;
    } else {
      job.turn = state.count === 0 ? 0 : this.#floor(job.priority);
      state.lineages.set(lineage, { last: job.turn, count: 1 });
    }
    state.count++;
    job.agedFrom = state.busySince;
    let levels = this.#groups.get(job.compatKey);
    if (!levels) this.#groups.set(job.compatKey, (levels = new Map()));
    let lineages = levels.get(job.priority);
    if (!lineages) levels.set(job.priority, (lineages = new Map()));
    let fifo = lineages.get(lineage);
    if (!fifo) lineages.set(lineage, (fifo = new Fifo()));
    fifo.push(job);
    this.#byId.set(job.id, job);
  }

  remove(id: string): QueuedJob | undefined {
    const job = this.#byId.get(id);
    if (!job) return undefined;
    this.#byId.delete(id);
    const lineage = job.lineage ?? NO_LINEAGE;
    const levels = this.#groups.get(job.compatKey)!;
    const lineages = levels.get(job.priority)!;
    const fifo = lineages.get(lineage)!;
    fifo.delete(job);
    if (fifo.size === 0) lineages.delete(lineage);
    if (lineages.size === 0) levels.delete(job.priority);
    if (levels.size === 0) this.#groups.delete(job.compatKey);
    const state = this.#levels.get(job.priority)!;
    state.count--;
    const mine = state.lineages.get(lineage)!;
    if (--mine.count === 0) state.lineages.delete(lineage);
    return job;
  }

  /** Each compatibility group: its size, its best job (and that job's rank) and its oldest arrival. */
  groups(now: number, agingMs: number): { key: string; size: number; best: QueuedJob; rank: Rank; oldestAt: number }[] {
    const floors = this.#floors();
    const result = [];
    for (const [key, levels] of this.#groups) {
      let size = 0;
      let best: QueuedJob | undefined;
      let bestRank: Rank | undefined;
      let oldestAt = Infinity;
      for (const lineages of levels.values()) {
        for (const fifo of lineages.values()) {
          size += fifo.size;
          const head = fifo.head()!;
          const rank = rankOf(head, now, agingMs, floors);
          if (!bestRank || compareRanks(rank, bestRank) < 0) [best, bestRank] = [head, rank];
          oldestAt = Math.min(oldestAt, head.enqueuedAt);
        }
      }
      result.push({ key, size, best: best!, rank: bestRank!, oldestAt });
    }
    return result;
  }

  /** How many queued jobs rank before `job` (for explaining its place). */
  ahead(job: QueuedJob, now: number, agingMs: number): number {
    const floors = this.#floors();
    const mine = rankOf(job, now, agingMs, floors);
    let count = 0;
    for (const other of this.#byId.values()) if (other !== job && compareRanks(rankOf(other, now, agingMs, floors), mine) < 0) count++;
    return count;
  }

  /** Remove and return up to `count` jobs of one group, best first: round-robin between its lineages by turn. */
  take(key: string, count: number, now: number, agingMs: number): QueuedJob[] {
    const levels = this.#groups.get(key);
    const taken: QueuedJob[] = [];
    // The fronts as they stand now: taking jobs moves a level's front, but every job of the level by the same amount.
    const floors = levels ? this.#floors() : null;
    while (levels && levels.size > 0 && taken.length < count) {
      let best: QueuedJob | undefined;
      let bestRank: Rank | undefined;
      for (const lineages of levels.values()) {
        for (const fifo of lineages.values()) {
          const head = fifo.head()!;
          const rank = rankOf(head, now, agingMs, floors!);
          if (!bestRank || compareRanks(rank, bestRank) < 0) [best, bestRank] = [head, rank];
        }
      }
      this.remove(best!.id);
      taken.push(best!);
    }
    return taken;
  }

  /**
   * The front of each level where several lineages wait: the smallest turn there (each lineage FIFO's head holds its
   * smallest). A level of one lineage needs none — its jobs' order is their arrival — so the common case scans nothing.
   */
  #floors(): ReadonlyMap<number, number> {
    let shared: Set<number> | null = null;
    for (const [priority, state] of this.#levels) if (state.lineages.size > 1) (shared ??= new Set()).add(priority);
    return shared ? this.#scanFloors(shared) : NO_FLOORS;
  }

  #floor(priority: number): number {
    return this.#scanFloors(new Set([priority])).get(priority) ?? 0;
  }

  #scanFloors(priorities: ReadonlySet<number>): Map<number, number> {
    const floors = new Map<number, number>();
    for (const levels of this.#groups.values()) {
      for (const [priority, lineages] of levels) {
        if (!priorities.has(priority)) continue;
        for (const fifo of lineages.values()) {
          const turn = fifo.head()!.turn!;
          const floor = floors.get(priority);
          if (floor === undefined || turn < floor) floors.set(priority, turn);
        }
      }
    }
    return floors;
  }
}

const NO_FLOORS: ReadonlyMap<number, number> = new Map();

/** A job's rank against the fronts of the levels where several lineages wait (elsewhere its lag is 0: arrival decides). */
function rankOf(job: QueuedJob, now: number, agingMs: number, floors: ReadonlyMap<number, number>): Rank {
  const floor = floors.get(job.priority);
  return { level: effectivePriority(job, now, agingMs), lag: floor === undefined ? 0 : job.turn! - floor, seq: job.seq };
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
