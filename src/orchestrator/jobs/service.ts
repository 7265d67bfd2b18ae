import {
  isTerminal, MeshError, SubmitJobBody, type ArtifactView, type BulkItemResult, type JobEvent, type JobStatus, type JobView,
} from '../../protocol/index.js';
import { firstFailure, type GrantRequest, type VerifiedGrant } from '../auth/index.js';
import type { Clock } from '../clock.js';
import type { MeshConfig } from '../config.js';
import type { EventScope } from '../events.js';
import type { MeshMetrics } from '../metrics.js';
import type { ModelRegistry } from '../registry/index.js';
import type { Admission, Scheduler } from '../scheduler/index.js';
import { artifacts, jobs as jobStore, type Db, type GroupCommit, type JobRecord } from '../store/index.js';
import { newId } from '../ids.js';
import type { Cancellation } from './cancellation.js';
import type { Dispatcher } from './dispatcher.js';
import type { JobStates } from './states.js';
import { artifactView, jobView, snapshotEvents } from './views.js';

const IDEMPOTENCY_WINDOW_MS = 24 * 3600 * 1000;
export const DEFAULT_ALBUM = 'default';

export interface JobServiceDeps {
  db: Db;
  commits: GroupCommit;
  clock: Clock;
  config: MeshConfig;
  registry: ModelRegistry;
  scheduler: Scheduler;
  admission: Admission;
  states: JobStates;
  dispatcher: Dispatcher;
  cancellation: Cancellation;
  metrics: MeshMetrics;
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

export function encodeCursor(seq: number): string {
  return Buffer.from(`s${seq}`).toString('base64url');
}

export function decodeCursor(cursor: string): number {
  const text = Buffer.from(cursor, 'base64url').toString();
  const seq = /^s(\d+)$/.exec(text)?.[1];
  if (!seq) throw new MeshError('BAD_REQUEST', { detail: `cursor "${cursor.slice(0, 50)}" is not one this server gave out` });
  return Number(seq);
}

/** What clients do with jobs: submit, read, list, cancel, follow — each checked against the caller's grant. */
export class JobService {
  readonly #deps: JobServiceDeps;

  constructor(deps: JobServiceDeps) {
    this.#deps = deps;
  }

  /**
   * Admit a job; resolves once it is committed (the 202 promises the job is stored).
   * `created` is false for an idempotent repeat.
   */
  async submit(grant: VerifiedGrant, body: SubmitJobBody, authorize: Authorize): Promise<{ job: JobRecord; created: boolean }> {
    const admitted = this.#admit(grant, body, authorize);
    await this.#deps.commits.durable();
    return admitted;
  }

  /**
   * Admit many jobs at once (the counterpart of BullMQ's addBulk): each is
   * validated, authorized and admitted or refused on its own, all in one
   * group commit; resolves once the admitted ones are committed.
   */
  async submitMany(grant: VerifiedGrant, items: readonly unknown[], authorize: Authorize): Promise<BulkItemResult[]> {
    const results = items.map((item, index): BulkItemResult => {
      const parsed = SubmitJobBody.safeParse(item);
      if (!parsed.success) {
        const detail = parsed.error.issues.map((issue) => `jobs.${index}${issue.path.map((part) => `.${String(part)}`).join('')}: ${issue.message}`).join('; ');
        return { status: 400, error: new MeshError('VALIDATION_FAILED', { detail }).toJSON() };
      }
      try {
        const { job, created } = this.#admit(grant, parsed.data, authorize);
        return { status: created ? 202 : 200, id: job.id, jobStatus: job.status, created };
      } catch (error) {
        if (error instanceof MeshError && error.status < 500) return { status: error.status, error: error.toJSON() };
        throw error;
      }
    });
    await this.#deps.commits.durable();
    return results;
  }

  #admit(grant: VerifiedGrant, body: SubmitJobBody, authorize: Authorize): { job: JobRecord; created: boolean } {
    const { db, clock, config, registry, scheduler, admission, states } = this.#deps;
    const now = clock.now();
    const routing = config.routing[body.type];
    if (!routing) {
      throw new MeshError('UNKNOWN_JOB_TYPE', { type: body.type, known: Object.keys(config.routing).join(', ') });
    }
    const model = registry.resolve(body.type, body.model);
    const name = model.manifest.name;
    const priority = body.priority ?? config.priorities.default;
    if (priority > config.priorities.levels) {
      throw new MeshError('VALIDATION_FAILED', { detail: `priority ${priority} is beyond the lowest level, ${config.priorities.levels}` });
    }
    const album = body.album ?? DEFAULT_ALBUM;
    authorize({ action: 'jobs:submit', jobType: body.type, model: name, classes: routing, album });
    if (grant.maxPriority !== null && priority < grant.maxPriority) {
      throw new MeshError('PRIORITY_DENIED', { ceiling: grant.maxPriority, priority });
    }
    const classes = grant.classes ? routing.filter((name) => grant.classes!.includes(name)) : routing;
    if (body.timeoutMs !== undefined && body.timeoutMs > model.policy.maxTimeoutMs) {
      throw new MeshError('TIMEOUT_TOO_LONG', { timeoutMs: body.timeoutMs, limit: model.policy.maxTimeoutMs, model: name });
    }
    const input = model.pipeline.normalize(body.input, model.manifest);

    if (body.idempotencyKey) {
      const existing = jobStore.getJobByIdempotencyKey(db, grant.id, body.idempotencyKey, now - IDEMPOTENCY_WINDOW_MS);
      if (existing) return { job: states.get(existing.id) ?? existing, created: false };
    }
    try {
      if (grant.ratePerMinute !== null) admission.takeRate(grant.tokenKey, grant.ratePerMinute);
      admission.checkBounds(name, scheduler.depth(name), model.policy.maxQueueSize, scheduler.totalDepth, config.queues.maxTotal);
    } catch (error) {
      if (error instanceof MeshError && error.status === 429) {
        this.#deps.metrics.rejected(name, error.code === 'RATE_LIMITED' ? 'rate_limited' : error.code === 'MESH_FULL' ? 'mesh_full' : 'queue_full');
      }
      throw error;
    }
    // A key older than the window is free again: the old job gives it up so the unique index allows the new one.
    const stale = body.idempotencyKey ? jobStore.getJobByIdempotencyKey(db, grant.id, body.idempotencyKey, 0) : null;
    const job = states.create({
      id: newId('j'), type: body.type, model: name, priority, album, classes, hosts: grant.hosts, input,
      grantId: grant.id, idempotencyKey: body.idempotencyKey ?? null, createdAt: now,
      deadlineAt: body.timeoutMs === undefined ? null : now + body.timeoutMs,
    }, stale?.id);
    this.#deps.cancellation.arm(job);
    this.#deps.dispatcher.enqueue(job);
    return { job, created: true };
  }

  /** A job the grant may see; 404 otherwise (a grant does not learn what it cannot see). */
  get(grant: VerifiedGrant, id: string): JobView {
    return jobView(this.#deps.db, this.record(grant, id));
  }

  record(grant: VerifiedGrant, id: string): JobRecord {
    const job = this.#deps.states.get(id);
    if (!job || !canSee(grant, job, this.#deps.clock.now())) throw new MeshError('NOT_FOUND', { what: `Job ${id}` });
    return job;
  }

  /** The events that describe where a job the grant may see stands now. */
  snapshot(grant: VerifiedGrant, id: string): JobEvent[] {
    return snapshotEvents(this.#deps.db, this.record(grant, id));
  }

  list(grant: VerifiedGrant, query: ListQuery): { jobs: JobView[]; nextCursor: string | null } {
    const { db } = this.#deps;
    const records = jobStore.listJobs(db, {
      statuses: query.statuses,
      types: grant.types, models: grant.models, albums: grant.albums,
      beforeSeq: query.cursor ? decodeCursor(query.cursor) : undefined,
      limit: query.limit,
    });
    const last = records.at(-1);
    return {
      jobs: records.map((record) => jobView(db, record)),
      nextCursor: records.length === query.limit && last ? encodeCursor(last.seq) : null,
    };
  }

  /** Published results the grant may see, newest first. */
  artifacts(grant: VerifiedGrant, query: { limit: number; cursor?: string }): { artifacts: ArtifactView[]; nextCursor: string | null } {
    const records = artifacts.listArtifacts(this.#deps.db, {
      types: grant.types, models: grant.models, albums: grant.albums, limit: query.limit,
      beforeSeq: query.cursor ? decodeCursor(query.cursor) : undefined,
    });
    const last = records.at(-1);
    return { artifacts: records.map(artifactView), nextCursor: records.length === query.limit && last ? encodeCursor(last.seq) : null };
  }

  cancel(grant: VerifiedGrant, id: string, authorize: Authorize): JobView {
    const job = this.record(grant, id);
    authorize({ action: 'jobs:cancel', jobType: job.type, model: job.model, album: job.album });
    if (isTerminal(job.status) || !this.#deps.cancellation.cancel(id)) {
      throw new MeshError('JOB_NOT_CANCELLABLE', { id, status: this.#deps.states.get(id)?.status ?? job.status });
    }
    return jobView(this.#deps.db, this.#deps.states.get(id)!);
  }

  /** Jobs in each state (for status views). */
  counts(): Record<string, number> {
    return jobStore.countByStatus(this.#deps.db);
  }
}
