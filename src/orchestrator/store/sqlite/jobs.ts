import type { JobStatus } from '../../../protocol/index.js';
import {
  inputText, jobFromRow, queuedRecord, RECORD_COLUMNS, recordValues, resultText, type JobCaps, type JobEnd, type JobFilter, type JobOutcome, type JobRecord, type JobRow, type JobTable, type NewJob,
} from '../contract/jobs.js';
import { modelIn } from './model-filter.js';
import { stmt, type Db } from './db.js';

/** The prompt of a job row aliased `j`, in SQL (contract/jobs.ts, promptOf): the gallery's artifact lists read it. */
export const PROMPT_SQL = `(CASE json_type(j.input, '$.prompt') WHEN 'text' THEN json_extract(j.input, '$.prompt') END)`;

/**
 * Insert a queued job; returns it with its sequence number and prompt. `seq`: the number the store reserved for it
 * (jobTable); without one SQLite takes the next rowid.
 */
export function insertJob(db: Db, job: NewJob, seq: number | null = null): JobRecord {
  const hosts = job.hosts ?? null;
  // `seq` is the rowid: read back as the insert's lastInsertRowid (1.5 µs less than RETURNING, which builds a result row).
  const rowid = Number(stmt(db, `INSERT INTO jobs (seq, id, type, model, status, priority, album, classes, hosts, input, grant_id, idempotency_key,
      request_hash, created_at, updated_at, deadline_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`).run(
    seq, job.id, job.type, job.model, job.status ?? 'queued', job.priority, job.album, JSON.stringify(job.classes), hosts === null ? null : JSON.stringify(hosts),
    inputText(job), job.grantId, job.idempotencyKey, job.requestHash ?? null, job.createdAt, job.createdAt, job.deadlineAt,
  ).lastInsertRowid);
  return queuedRecord(job, rowid);
}

const INSERT_RECORD = `INSERT INTO jobs (${RECORD_COLUMNS.join(', ')}) VALUES (${RECORD_COLUMNS.map(() => '?').join(', ')})`;

/** Write the row of a job reserved and not written before, as it stands or as `end` finishes it (JobTable.insertRecord). */
export function insertRecord(db: Db, job: JobRecord, end?: JobEnd, inputJson?: string | null): void {
  stmt(db, INSERT_RECORD).run(...recordValues(job, end, inputJson));
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
 * A batch of queued jobs leaves for a host, keeping the routing decision (one string the batch shares): one statement
 * for the batch, its rows found by their numbers (`seq`, SQLite's own key, not the index of ids). Returns the seqs
 * that were still queued — every one, unless the rows say otherwise than the orchestrator's memory (which decides:
 * JobStates), when they are read back.
 */
export function markDispatched(db: Db, seqs: readonly number[], batchId: string, host: string, now: number, route: string | null = null): Set<number> {
  if (seqs.length === 0) return new Set();
  const list = seqList(seqs);
  const { changes } = stmt(db, `UPDATE jobs SET status = 'dispatched', attempts = attempts + 1, batch_id = ?, batch_size = ?, lease_host = ?,
    dispatched_at = ?, started_at = NULL, route = ?, updated_at = ? WHERE seq IN (${list.marks}) AND status = 'queued'`).run(batchId, seqs.length, host, now, route, now, ...list.values);
  if (changes === seqs.length) return new Set(seqs);
  return new Set((stmt(db, `SELECT seq FROM jobs WHERE seq IN (${list.marks}) AND batch_id = ?`).pluck().all(...list.values, batchId) as number[]));
}

/**
 * Seqs as the values of an `IN (…)` list, padded to the next power of two with the last one (a repeat changes nothing):
 * a batch of any size uses one of a dozen prepared statements, not a statement of its own.
 */
function seqList(seqs: readonly number[]): { marks: string; values: number[] } {
  const size = 2 ** Math.ceil(Math.log2(seqs.length));
  const values = seqs.slice();
  while (values.length < size) values.push(seqs[seqs.length - 1]!);
  return { marks: MARKS[Math.log2(size)] ??= values.map(() => '?').join(', '), values };
}
/** The placeholders of an `IN` list of 2^n values, made once for each n. */
const MARKS: string[] = [];

/** The agent started a batch: those of its jobs that are still dispatched are running (one statement). */
export function markRunning(db: Db, seqs: readonly number[], now: number): void {
  if (seqs.length === 0) return;
  const list = seqList(seqs);
  stmt(db, `UPDATE jobs SET status = 'running', started_at = ?, updated_at = ? WHERE seq IN (${list.marks}) AND status = 'dispatched'`).run(now, now, ...list.values);
}

/** Put a dispatched or running job back in its queue (its attempt failed or its lease lapsed). */
export function requeueJob(db: Db, seq: number, now: number): boolean {
  return stmt(db, `UPDATE jobs SET status = 'queued', lease_host = NULL, updated_at = ?
    WHERE seq = ? AND status IN ('dispatched', 'running')`).run(now, seq).changes === 1;
}

/** A waiting job's sources succeeded: it is queued, its input naming their outputs by digest. */
export function releaseJob(db: Db, seq: number, input: Record<string, unknown>, now: number): boolean {
  return stmt(db, `UPDATE jobs SET status = 'queued', input = ?, updated_at = ? WHERE seq = ? AND status = 'waiting'`)
    .run(JSON.stringify(input), now, seq).changes === 1;
}

/**
 * Move a job to a terminal state unless it is already in one. Returns false
 * when it was already terminal, which makes late and duplicate results harmless.
 * `attempt`: the attempt it succeeded with, kept on the row.
 */
export function finishJob(
  db: Db, seq: number, status: 'succeeded' | 'failed' | 'cancelled' | 'expired', now: number,
  outcome: JobOutcome = {},
): boolean {
  const { attempt } = outcome;
  if (attempt) {
    return stmt(db, `UPDATE jobs SET status = ?, finished_at = ?, updated_at = ?, lease_host = NULL, result = ?, error_code = NULL,
        error_message = NULL, attempt_host = ?, started_at = ?, load_ms = ?, compute_ms = ?
      WHERE seq = ? AND status IN ('waiting', 'queued', 'dispatched', 'running')`).run(
      status, now, now, resultText(outcome), attempt.host, attempt.startedAt, attempt.loadMs,
      attempt.computeMs, seq,
    ).changes === 1;
  }
  return stmt(db, `UPDATE jobs SET status = ?, finished_at = ?, updated_at = ?, lease_host = NULL,
      result = ?, error_code = ?, error_message = ?
    WHERE seq = ? AND status IN ('waiting', 'queued', 'dispatched', 'running')`).run(
    status, now, now, resultText(outcome),
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

/** See JobTable.deviceMsByGrant. */
export function deviceMsByGrant(db: Db, since: number): Map<string, number> {
  const rows = db.prepare(`SELECT grant_id, SUM(compute_ms / MAX(COALESCE(batch_size, 1), 1)) AS ms FROM jobs
    WHERE status = 'succeeded' AND finished_at >= ? AND compute_ms IS NOT NULL GROUP BY grant_id`).all(since) as { grant_id: string; ms: number }[];
  return new Map(rows.map((row) => [row.grant_id, row.ms]));
}

/** Delete jobs with their attempts, uploads, input records and kept caps (their results are never among them: see prunableJobs). */
export function deleteJobs(db: Db, ids: readonly string[]): void {
  const statements = ['attempts', 'uploads', 'job_inputs', 'job_caps'].map((table) => stmt(db, `DELETE FROM ${table} WHERE job_id = ?`));
  statements.push(stmt(db, 'DELETE FROM jobs WHERE id = ?'));
  for (const id of ids) for (const statement of statements) statement.run(id);
}

/**
 * The jobs table on one connection: reads answer at once, as promises. Job numbers are handed out here, from the
 * largest in the table on, as PostgreSQL's store hands them out from its reserved blocks: a job reserved and written
 * later (reserveJob, insertRecord) keeps the number it was admitted with, and no insert in between can take it.
 */
export function jobTable(db: Db): JobTable {
  let last: number | null = null;
  const nextSeq = (): number => {
    last ??= (stmt(db, 'SELECT coalesce(max(seq), 0) AS seq FROM jobs').get() as { seq: number }).seq;
    return ++last;
  };
  return {
    insertJob: (job) => insertJob(db, job, nextSeq()),
    reserveJob: (job) => queuedRecord(job, nextSeq()),
    insertRecord: (job, end, inputJson) => insertRecord(db, job, end, inputJson),
    releaseIdempotencyKey: (id) => releaseIdempotencyKey(db, id),
    markDispatched: (seqs, batchId, host, now, route) => markDispatched(db, seqs, batchId, host, now, route),
    markRunning: (seqs, now) => markRunning(db, seqs, now),
    requeueJob: (seq, now) => requeueJob(db, seq, now),
    releaseJob: (seq, input, now) => releaseJob(db, seq, input, now),
    recordCaps: (jobId, caps) => {
      stmt(db, 'INSERT OR REPLACE INTO job_caps (job_id, caps) VALUES (?, ?)').run(jobId, JSON.stringify(caps));
    },
    capsOf: async (jobId) => {
      const row = stmt(db, 'SELECT caps FROM job_caps WHERE job_id = ?').get(jobId) as { caps: string } | undefined;
      return row ? JSON.parse(row.caps) as JobCaps : null;
    },
    finishJob: (seq, status, now, outcome) => finishJob(db, seq, status, now, outcome),
    getJob: async (id) => getJob(db, id),
    getJobByIdempotencyKey: async (grantId, key, since) => getJobByIdempotencyKey(db, grantId, key, since),
    idempotencyEntry: async (grantId, key, since) => idempotencyEntry(db, grantId, key, since),
    listJobs: async (filter) => listJobs(db, filter),
    jobsInStates: async (statuses) => jobsInStates(db, statuses),
    countByStatus: async () => countByStatus(db),
    deviceMsByGrant: async (since) => deviceMsByGrant(db, since),
    prunableJobs: async (before, limit) => prunableJobs(db, before, limit),
    deleteJobs: (ids) => deleteJobs(db, ids),
  };
}
