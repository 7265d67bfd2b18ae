import type { JobStatus } from '../../protocol/index.js';
import { modelIn } from './model-filter.js';
import { stmt, type Db } from './db.js';

/** One job as stored; times are epoch milliseconds. */
export interface JobRecord {
  seq: number;
  id: string;
  type: string;
  model: string;
  status: JobStatus;
  priority: number;
  album: string;
  /** Host classes the job may run on, in order of preference: its type's routing, narrowed by its grant. */
  classes: string[];
  /** Hosts its grant allows it to run on; null: any. */
  hosts: string[] | null;
  input: Record<string, unknown>;
  /** The input's prompt, if it has one (promptOf). */
  prompt: string | null;
  grantId: string;
  idempotencyKey: string | null;
  createdAt: number;
  updatedAt: number;
  finishedAt: number | null;
  deadlineAt: number | null;
  attempts: number;
  batchId: string | null;
  batchSize: number | null;
  leaseHost: string | null;
  /** When the attempt in flight was dispatched, and when its host started it (null before). */
  dispatchedAt: number | null;
  startedAt: number | null;
  /** The routing decision of the attempt in flight (or the last one), encoded (routing/route-log.ts). */
  route: string | null;
  /**
   * How long the attempt in flight waited for its model to load, once its host started it (0: the model was
   * resident). Kept in memory while the attempt runs, and written with the attempt when it ends.
   */
  loadMs?: number | null;
  /**
   * The attempt that succeeded, kept on the row instead of in attempts (migration 11): its host and the engine's time
   * for its batch; its batch, times and route are the row's. Null until the job succeeds.
   */
  attemptHost: string | null;
  computeMs: number | null;
  result: unknown;
  errorCode: string | null;
  errorMessage: string | null;
}

export type NewJob = Pick<JobRecord, 'id' | 'type' | 'model' | 'priority' | 'album' | 'classes' | 'input' | 'grantId' | 'idempotencyKey' | 'createdAt' | 'deadlineAt'> & Partial<Pick<JobRecord, 'hosts'>> & {
  /** The canonical hash of the request that created the job, kept with its idempotency key (see JobAdmission). */
  requestHash?: string | null;
};

/** A row of `jobs` as both stores read it (JSON in text columns, times in epoch ms). */
export interface JobRow {
  seq: number; id: string; type: string; model: string; status: string; priority: number; album: string; classes: string; hosts: string | null; input: string;
  grant_id: string; idempotency_key: string | null; created_at: number; updated_at: number; finished_at: number | null;
  deadline_at: number | null; attempts: number; batch_id: string | null; batch_size: number | null; lease_host: string | null;
  dispatched_at: number | null; started_at: number | null; route: string | null; result: string | null; error_code: string | null; error_message: string | null;
  attempt_host: string | null; load_ms: number | null; compute_ms: number | null;
}

export function jobFromRow(row: JobRow): JobRecord {
  const input = JSON.parse(row.input) as Record<string, unknown>;
  return {
    seq: row.seq, id: row.id, type: row.type, model: row.model, status: row.status as JobStatus, priority: row.priority,
    album: row.album, classes: JSON.parse(row.classes) as string[], hosts: row.hosts === null ? null : JSON.parse(row.hosts) as string[], input, prompt: promptOf(input), grantId: row.grant_id,
    idempotencyKey: row.idempotency_key, createdAt: row.created_at, updatedAt: row.updated_at, finishedAt: row.finished_at,
    deadlineAt: row.deadline_at, attempts: row.attempts, batchId: row.batch_id, batchSize: row.batch_size,
    leaseHost: row.lease_host, dispatchedAt: row.dispatched_at, startedAt: row.started_at, route: row.route, loadMs: row.load_ms,
    attemptHost: row.attempt_host, computeMs: row.compute_ms,
    result: row.result === null ? null : JSON.parse(row.result), errorCode: row.error_code, errorMessage: row.error_message,
  };
}

/**
 * A job's prompt is its input's `prompt`, stored once, in the input. Read in JS from an input in hand (`promptOf`),
 * or in SQL from a job row aliased `j` where the input is not parsed (`PROMPT_SQL`: the gallery's artifact lists).
 * Not a column: a generated column is recomputed every time SQLite rewrites the row (migration 10).
 */
export const promptOf = (input: Record<string, unknown>): string | null => (typeof input.prompt === 'string' ? input.prompt : null);
export const PROMPT_SQL = `(CASE json_type(j.input, '$.prompt') WHEN 'text' THEN json_extract(j.input, '$.prompt') END)`;

/** Insert a queued job; returns it with its sequence number and prompt. */
export function insertJob(db: Db, job: NewJob): JobRecord {
  const hosts = job.hosts ?? null;
  // `seq` is the rowid: read back as the insert's lastInsertRowid (1.5 µs less than RETURNING, which builds a result row).
  const seq = Number(stmt(db, `INSERT INTO jobs (id, type, model, status, priority, album, classes, hosts, input, grant_id, idempotency_key,
      request_hash, created_at, updated_at, deadline_at) VALUES (?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`).run(
    job.id, job.type, job.model, job.priority, job.album, JSON.stringify(job.classes), hosts === null ? null : JSON.stringify(hosts),
    JSON.stringify(job.input), job.grantId, job.idempotencyKey, job.requestHash ?? null, job.createdAt, job.createdAt, job.deadlineAt,
  ).lastInsertRowid);
  return queuedRecord(job, seq);
}

/** The record of a job just stored as queued under `seq` (either store's insert answers it). */
export function queuedRecord(job: NewJob, seq: number): JobRecord {
  // Every field written out, in one literal: spreading the new job and adding the rest costs V8 about 25 µs an object.
  return {
    seq, id: job.id, type: job.type, model: job.model, status: 'queued', priority: job.priority, album: job.album,
    classes: job.classes, hosts: job.hosts ?? null, input: job.input, prompt: promptOf(job.input), grantId: job.grantId, idempotencyKey: job.idempotencyKey,
    createdAt: job.createdAt, updatedAt: job.createdAt, finishedAt: null, deadlineAt: job.deadlineAt, attempts: 0, batchId: null,
    batchSize: null, leaseHost: null, dispatchedAt: null, startedAt: null, route: null, loadMs: null, attemptHost: null, computeMs: null,
    result: null, errorCode: null, errorMessage: null,
  };
}

export function getJob(db: Db, id: string): JobRecord | null {
  const row = stmt(db, 'SELECT * FROM jobs WHERE id = ?').get(id) as JobRow | undefined;
  return row ? jobFromRow(row) : null;
}

export function getJobByIdempotencyKey(db: Db, grantId: string, key: string, since: number): JobRecord | null {
  const row = stmt(db, 'SELECT * FROM jobs WHERE grant_id = ? AND idempotency_key = ? AND created_at >= ?').get(grantId, key, since) as JobRow | undefined;
  return row ? jobFromRow(row) : null;
}

/** The job an idempotency key names within the window, with the hash of the request that created it (null for jobs stored before hashes were kept). */
export function idempotencyEntry(db: Db, grantId: string, key: string, since: number): { id: string; requestHash: string | null } | null {
  const row = stmt(db, 'SELECT id, request_hash FROM jobs WHERE grant_id = ? AND idempotency_key = ? AND created_at >= ?').get(grantId, key, since) as
    { id: string; request_hash: string | null } | undefined;
  return row ? { id: row.id, requestHash: row.request_hash } : null;
}

/** Free an expired idempotency key so the same key can name a new job. */
export function releaseIdempotencyKey(db: Db, id: string): void {
  stmt(db, 'UPDATE jobs SET idempotency_key = NULL WHERE id = ?').run(id);
}

export interface JobFilter {
  statuses?: readonly JobStatus[];
  types?: readonly string[] | null;
  models?: readonly string[] | null;
  albums?: readonly string[] | null;
  /** Only jobs with seq below this (the page cursor). */
  beforeSeq?: number;
  limit: number;
}

const placeholders = (values: readonly unknown[]): string => values.map(() => '?').join(', ');

/** Jobs newest first. `null` lists mean "no restriction". */
export function listJobs(db: Db, filter: JobFilter): JobRecord[] {
  const where: string[] = [];
  const args: unknown[] = [];
  const restrict = (column: string, values: readonly unknown[] | null | undefined): void => {
    if (!values) return;
    if (values.length === 0) where.push('0');
    else { where.push(`${column} IN (${placeholders(values)})`); args.push(...values); }
  };
  restrict('status', filter.statuses);
  restrict('type', filter.types);
  if (filter.models?.length) {
    const models = modelIn('model', filter.models);
    where.push(models.sql);
    args.push(...models.args);
  } else restrict('model', filter.models);
  restrict('album', filter.albums);
  if (filter.beforeSeq !== undefined) { where.push('seq < ?'); args.push(filter.beforeSeq); }
  const sql = `SELECT * FROM jobs ${where.length ? `WHERE ${where.join(' AND ')}` : ''} ORDER BY seq DESC LIMIT ?`;
  return (db.prepare(sql).all(...args, filter.limit) as JobRow[]).map(jobFromRow);
}

/** Jobs in any of these states, oldest first (used to rebuild queues and leases at start). */
export function jobsInStates(db: Db, statuses: readonly JobStatus[]): JobRecord[] {
  return (db.prepare(`SELECT * FROM jobs WHERE status IN (${placeholders(statuses)}) ORDER BY seq`).all(...statuses) as JobRow[]).map(jobFromRow);
}

/**
 * A batch of queued jobs leaves for a host (each statement by the job's row number, `seq`: SQLite's own key, found
 * without the index of ids), keeping the routing decision (one string the batch shares). Returns the seqs that were
 * still queued.
 */
export function markDispatched(db: Db, seqs: readonly number[], batchId: string, host: string, now: number, route: string | null = null): Set<number> {
  const update = stmt(db, `UPDATE jobs SET status = 'dispatched', attempts = attempts + 1, batch_id = ?, batch_size = ?, lease_host = ?,
    dispatched_at = ?, started_at = NULL, route = ?, updated_at = ? WHERE seq = ? AND status = 'queued'`);
  const moved = new Set<number>();
  for (const seq of seqs) if (update.run(batchId, seqs.length, host, now, route, now, seq).changes === 1) moved.add(seq);
  return moved;
}

/** The agent started a batch: those of its jobs that are still dispatched are running. */
export function markRunning(db: Db, seqs: readonly number[], now: number): void {
  const update = stmt(db, `UPDATE jobs SET status = 'running', started_at = ?, updated_at = ? WHERE seq = ? AND status = 'dispatched'`);
  for (const seq of seqs) update.run(now, now, seq);
}

/** Put a dispatched or running job back in its queue (its attempt failed or its lease lapsed). */
export function requeueJob(db: Db, seq: number, now: number): boolean {
  return stmt(db, `UPDATE jobs SET status = 'queued', lease_host = NULL, updated_at = ?
    WHERE seq = ? AND status IN ('dispatched', 'running')`).run(now, seq).changes === 1;
}

/** The attempt a job succeeded with, kept on its row (JobRecord.attemptHost). */
export interface SucceededAttempt {
  host: string;
  /** When its host started it (a batch reported started by its first result is not stored as running). */
  startedAt: number | null;
  loadMs: number | null;
  computeMs: number;
}

/**
 * Move a job to a terminal state unless it is already in one. Returns false
 * when it was already terminal, which makes late and duplicate results harmless.
 * `attempt`: the attempt it succeeded with, kept on the row.
 */
export function finishJob(
  db: Db, seq: number, status: 'succeeded' | 'failed' | 'cancelled' | 'expired', now: number,
  outcome: { result?: unknown; errorCode?: string; errorMessage?: string; attempt?: SucceededAttempt } = {},
): boolean {
  const { attempt } = outcome;
  if (attempt) {
    return stmt(db, `UPDATE jobs SET status = ?, finished_at = ?, updated_at = ?, lease_host = NULL, result = ?, error_code = NULL,
        error_message = NULL, attempt_host = ?, started_at = ?, load_ms = ?, compute_ms = ?
      WHERE seq = ? AND status IN ('queued', 'dispatched', 'running')`).run(
      status, now, now, outcome.result === undefined ? null : JSON.stringify(outcome.result), attempt.host, attempt.startedAt, attempt.loadMs,
      attempt.computeMs, seq,
    ).changes === 1;
  }
  return stmt(db, `UPDATE jobs SET status = ?, finished_at = ?, updated_at = ?, lease_host = NULL,
      result = ?, error_code = ?, error_message = ?
    WHERE seq = ? AND status IN ('queued', 'dispatched', 'running')`).run(
    status, now, now, outcome.result === undefined ? null : JSON.stringify(outcome.result),
    outcome.errorCode ?? null, outcome.errorMessage ?? null, seq,
  ).changes === 1;
}

export function countByStatus(db: Db): Record<string, number> {
  const rows = stmt(db, 'SELECT status, COUNT(*) AS n FROM jobs GROUP BY status').all() as { status: string; n: number }[];
  return Object.fromEntries(rows.map((row) => [row.status, row.n]));
}

/**
 * Finished jobs that no published result names, finished before `before`, oldest first, at most `limit`: what the
 * job retention deletes — with the digests only a job's rows may still name (its uploaded outputs, its input
 * pictures), for reclaiming once the rows are gone.
 */
export function prunableJobs(db: Db, before: number, limit: number): { ids: string[]; digests: string[] } {
  const ids = (stmt(db, `SELECT id FROM jobs WHERE status IN ('succeeded', 'failed', 'cancelled', 'expired') AND finished_at < ?
    AND NOT EXISTS (SELECT 1 FROM artifacts WHERE artifacts.job_id = jobs.id) ORDER BY seq LIMIT ?`).all(before, limit) as { id: string }[]).map((row) => row.id);
  const digests = new Set<string>();
  const uploads = stmt(db, 'SELECT digest FROM uploads WHERE job_id = ?');
  const inputs = stmt(db, 'SELECT digest FROM job_inputs WHERE job_id = ?');
  for (const id of ids) {
    for (const row of [...uploads.all(id), ...inputs.all(id)] as { digest: string }[]) digests.add(row.digest);
  }
  return { ids, digests: [...digests] };
}

/** Delete jobs with their attempts, uploads and input records (their results are never among them: see prunableJobs). */
export function deleteJobs(db: Db, ids: readonly string[]): void {
  const statements = ['DELETE FROM attempts WHERE job_id = ?', 'DELETE FROM uploads WHERE job_id = ?', 'DELETE FROM job_inputs WHERE job_id = ?', 'DELETE FROM jobs WHERE id = ?']
    .map((text) => stmt(db, text));
  for (const id of ids) for (const statement of statements) statement.run(id);
}
