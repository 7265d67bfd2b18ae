import { isTerminal, MeshError, type JobStatus, type JobView, type SubmitJobBody } from '../../protocol/index.js';
import type { VerifiedGrant } from '../auth/index.js';
import { firstFailure } from '../auth/index.js';
import type { Clock } from '../clock.js';
import type { MeshConfig } from '../config.js';
import type { EventScope } from '../events.js';
import type { MeshMetrics } from '../metrics.js';
import type { ModelRegistry, RegisteredModel } from '../registry/index.js';
import type { Admission, Scheduler } from '../scheduler/index.js';
import { jobs as jobStore, type Db, type GroupCommit, type JobRecord } from '../store/index.js';
import type { JobLifecycle } from './lifecycle.js';
import { jobView } from './views.js';
import { newId } from '../ids.js';

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
  lifecycle: JobLifecycle;
  metrics: MeshMetrics;
  /** Refuses a job too large for every host that could run it (MemoryPlanner.admit). */
  memory?: { admit(model: RegisteredModel, input: Record<string, unknown>, classes: readonly string[]): void };
}

export interface ListQuery {
  statuses?: JobStatus[];
  limit: number;
  cursor?: string;
}

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

/** What clients do with jobs: submit, read, list, cancel — each checked against the caller's grant. */
export class JobService {
  readonly #deps: JobServiceDeps;

  constructor(deps: JobServiceDeps) {
    this.#deps = deps;
  }

  /** Admit a job. Returns its record and whether it is new (false: an idempotent repeat). */
  submit(grant: VerifiedGrant, body: SubmitJobBody, authorize: (request: Parameters<typeof firstFailure>[1]) => void): { job: JobRecord; created: boolean } {
    const { db, clock, config, registry, scheduler, admission } = this.#deps;
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
      if (existing) return { job: existing, created: false };
    }
    this.#deps.memory?.admit(model, input, classes);
    try {
      if (grant.ratePerMinute !== null) admission.takeRate(grant.tokenKey, grant.ratePerMinute);
      admission.checkBounds(name, scheduler.depth(name), model.policy.maxQueueSize, scheduler.totalDepth, config.queues.maxTotal);
    } catch (error) {
      if (error instanceof MeshError && error.status === 429) {
        this.#deps.metrics.rejected(name, error.code === 'RATE_LIMITED' ? 'rate_limited' : error.code === 'MESH_FULL' ? 'mesh_full' : 'queue_full');
      }
      throw error;
    }

    const record = this.#deps.commits.write((): JobRecord => {
      if (body.idempotencyKey) {
        // A key older than the window is free again: clear it from the old job so the unique index allows the new one.
        const stale = jobStore.getJobByIdempotencyKey(db, grant.id, body.idempotencyKey, 0);
        if (stale) jobStore.releaseIdempotencyKey(db, stale.id);
      }
      return jobStore.insertJob(db, {
        id: newId('j'), type: body.type, model: name, priority, album, classes, input,
        grantId: grant.id, idempotencyKey: body.idempotencyKey ?? null, createdAt: now,
        deadlineAt: body.timeoutMs === undefined ? null : now + body.timeoutMs,
      });
    });
    this.#deps.lifecycle.admit(record);
    return { job: record, created: true };
  }

  /** A job the grant may see; 404 otherwise (a grant does not learn what it cannot see). */
  get(grant: VerifiedGrant, id: string): JobView {
    return jobView(this.#deps.db, this.record(grant, id));
  }

  record(grant: VerifiedGrant, id: string): JobRecord {
    const job = jobStore.getJob(this.#deps.db, id);
    if (!job || !canSee(grant, job, this.#deps.clock.now())) throw new MeshError('NOT_FOUND', { what: `Job ${id}` });
    return job;
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

  cancel(grant: VerifiedGrant, id: string, authorize: (request: Parameters<typeof firstFailure>[1]) => void): JobView {
    const job = this.record(grant, id);
    authorize({ action: 'jobs:cancel', jobType: job.type, model: job.model, album: job.album });
    if (isTerminal(job.status) || !this.#deps.lifecycle.cancel(id)) {
      const now = jobStore.getJob(this.#deps.db, id)!;
      throw new MeshError('JOB_NOT_CANCELLABLE', { id, status: now.status });
    }
    return jobView(this.#deps.db, jobStore.getJob(this.#deps.db, id)!);
  }
}
