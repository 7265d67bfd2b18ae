import type { JobEvent, JobPage, JobView } from '../../protocol/api/index.js';
import type { Clock } from '../../protocol/clock.js';
import { MeshError, type JobStatus } from '../../protocol/index.js';
import { firstFailure, type GrantRequest, type VerifiedGrant } from '../auth/index.js';
import type { EventScope } from '../events/event-bus.js';
import { decodeCursor, encodeCursor, type JobRecord, type MeshStore } from '../store/index.js';
import type { JobStates } from './states.js';
import { jobView, snapshotEvents } from './views.js';

export interface JobReadsDeps {
  store: MeshStore;
  clock: Clock;
  states: JobStates;
}

export interface ListQuery {
  statuses?: JobStatus[];
  limit: number;
  cursor?: string;
}

/** Throws unless the caller's grant allows this request. */
export type Authorize = (request: GrantRequest) => void;

/** Whether a grant may see a job or artifact with these attributes. */
export function canSee(grant: VerifiedGrant, scope: EventScope, now: number): boolean {
  return firstFailure(grant, { action: 'jobs:read', jobType: scope.type, model: scope.model, album: scope.album }, now) === null;
}

/**
 * The jobs a client's grant may see: one job, a page of them, where one stands now (its events), and the counts by
 * status. A job the grant may not see is NOT_FOUND, as if it did not exist: a grant does not learn what it cannot see.
 */
export class JobReads {
  readonly #deps: JobReadsDeps;

  constructor(deps: JobReadsDeps) {
    this.#deps = deps;
  }

  /** A job the grant may see; 404 otherwise (a grant does not learn what it cannot see). */
  async get(grant: VerifiedGrant, id: string): Promise<JobView> {
    return jobView(this.#deps.store, await this.record(grant, id));
  }

  /** The view of a job record in hand (one `record` gave), without reading the job from the store again. */
  viewOf(job: JobRecord): Promise<JobView> {
    return jobView(this.#deps.store, job);
  }

  /** Whether the grant may read a job in hand (GET /v1/jobs/:id would show it). */
  mayRead(grant: VerifiedGrant, job: JobRecord): boolean {
    return canSee(grant, job, this.#deps.clock.now());
  }

  /** A job in hand (one `submit` gave), if the grant may read it; NOT_FOUND otherwise, as `record`. */
  readable(grant: VerifiedGrant, job: JobRecord): JobRecord {
    if (!this.mayRead(grant, job)) throw new MeshError('NOT_FOUND', { what: `Job ${job.id}` });
    return job;
  }

  /** Whether the grant may read the job (GET /v1/jobs/:id would show it). */
  async canRead(grant: VerifiedGrant, id: string): Promise<boolean> {
    const job = await this.#deps.states.get(id);
    return job !== null && canSee(grant, job, this.#deps.clock.now());
  }

  async record(grant: VerifiedGrant, id: string): Promise<JobRecord> {
    const job = await this.#deps.states.get(id);
    if (!job) throw new MeshError('NOT_FOUND', { what: `Job ${id}` });
    return this.readable(grant, job);
  }

  /**
   * The job an idempotency key of the grant's lineage names (within the key's window), if the grant may read it; null
   * otherwise. The front doors find a job by the id their client chose with it.
   */
  async byKey(grant: VerifiedGrant, key: string, windowMs: number): Promise<JobRecord | null> {
    const { store, states, clock } = this.#deps;
    const found = await store.jobs.getJobByIdempotencyKey(grant.id, key, clock.now() - windowMs);
    // The record in memory while it runs (its status changes in place); the store's once it ended.
    const job = found ? states.active(found.id) ?? found : null;
    return job && this.mayRead(grant, job) ? job : null;
  }

  /** The events that describe where a job the grant may see stands now. */
  async snapshot(grant: VerifiedGrant, id: string): Promise<JobEvent[]> {
    return snapshotEvents(this.#deps.store, await this.record(grant, id));
  }

  async list(grant: VerifiedGrant, query: ListQuery): Promise<JobPage> {
    const { store, states, clock } = this.#deps;
    const beforeSeq = query.cursor ? decodeCursor(query.cursor) : undefined;
    // Jobs running for a waiting client are not written until they end (JobStates.create, deferred): listed from memory.
    // Taken before the store is read: one written while a store that writes behind answers is then in one list or both.
    // The ends due after this turn are written first, so the rows read are the jobs as they stand.
    states.writeEnds();
    const held = [...states.unwritten()];
    const stored = await store.jobs.listJobs({
      statuses: query.statuses, types: grant.types, models: grant.models, albums: grant.albums, beforeSeq, limit: query.limit,
    });
    const now = clock.now();
    const storedSeqs = held.length === 0 ? null : new Set(stored.map((job) => job.seq));
    const unwritten = held.filter((job) => (beforeSeq === undefined || job.seq < beforeSeq) && !storedSeqs?.has(job.seq)
      && (!query.statuses || query.statuses.includes(job.status)) && canSee(grant, job, now));
    const records = unwritten.length === 0 ? stored : [...stored, ...unwritten].sort((a, b) => b.seq - a.seq).slice(0, query.limit);
    const last = records.at(-1);
    return {
      jobs: await Promise.all(records.map((record) => jobView(store, record))),
      nextCursor: records.length === query.limit && last ? encodeCursor(last.seq) : null,
    };
  }

  /** Jobs in each state (for status views): the store's, and those not written until they end. */
  async counts(): Promise<Record<string, number>> {
    this.#deps.states.writeEnds();
    const counts = await this.#deps.store.jobs.countByStatus();
    for (const job of this.#deps.states.unwritten()) counts[job.status] = (counts[job.status] ?? 0) + 1;
    return counts;
  }
}
