import { inputText, jobFromRow, queuedRecord, RECORD_COLUMNS, recordValues, resultText, type JobCaps, type JobRow, type JobTable } from '../contract/jobs.js';
import { marks, Where, type PgAccess } from './access.js';

/** The prompt of a job row aliased `j`, in SQL (contract/jobs.ts, promptOf; SQLite's is sqlite/jobs.ts, PROMPT_SQL). */
export const PROMPT_SQL = `(CASE WHEN jsonb_typeof(j.input::jsonb -> 'prompt') = 'string' THEN j.input::jsonb ->> 'prompt' END)`;

/** Jobs finished with their attempt, many at once: the rows of finishJob's statement, in its parameters' order. */
const SUCCEEDED_ROWS = {
  key: 'jobs:succeeded',
  types: ['bigint', 'text', 'bigint', 'text', 'text', 'bigint', 'double precision', 'double precision'],
  sql: (tuples: string): string => `UPDATE jobs SET status = v.status, finished_at = v.now, updated_at = v.now, lease_host = NULL, result = v.result,
      error_code = NULL, error_message = NULL, attempt_host = v.host, started_at = v.started_at, load_ms = v.load_ms, compute_ms = v.compute_ms
    FROM (VALUES ${tuples}) AS v (seq, status, now, result, host, started_at, load_ms, compute_ms)
    WHERE jobs.seq = v.seq AND jobs.status IN ('waiting', 'queued', 'dispatched', 'running')`,
} as const;

/** A job's whole row (JobTable.insertRecord): consecutive ones are sent as one INSERT (pg-commits.ts, coalesced). */
const INSERT_RECORD = `INSERT INTO jobs (${RECORD_COLUMNS.join(', ')}) VALUES (${marks(RECORD_COLUMNS.length)})`;

/**
 * The jobs table in PostgreSQL. A job's number is known when it is admitted, before its row reaches the database
 * (`nextSeq`: from the blocks the store reserves); the conditional updates answer from what they were asked, as a
 * store that writes behind must (contract/mesh-store.ts).
 */
export function jobTable({ write, read }: PgAccess, nextSeq: () => number): JobTable {
  return {
    reserveJob: (job) => queuedRecord(job, nextSeq()),
    insertRecord: (job, end, inputJson) => write(INSERT_RECORD, recordValues(job, end, inputJson)),
    insertJob: (job) => {
      const seq = nextSeq();
      const hosts = job.hosts ?? null;
      // Every value a parameter (none twice, no literal): a turn's inserts are sent as one (pg-commits.ts, coalesced).
      write(`INSERT INTO jobs (seq, id, type, model, status, priority, album, classes, hosts, input, grant_id, idempotency_key,
          request_hash, created_at, updated_at, deadline_at) VALUES (${marks(16)})`, [
        seq, job.id, job.type, job.model, job.status ?? 'queued', job.priority, job.album, JSON.stringify(job.classes), hosts === null ? null : JSON.stringify(hosts),
        inputText(job), job.grantId, job.idempotencyKey, job.requestHash ?? null, job.createdAt, job.createdAt, job.deadlineAt,
      ]);
      return queuedRecord(job, seq);
    },
    releaseIdempotencyKey: (id) => write('UPDATE jobs SET idempotency_key = NULL WHERE id = $1', [id]),
    markDispatched: (seqs, batchId, host, now, route = null) => {
      write(`UPDATE jobs SET status = 'dispatched', attempts = attempts + 1, batch_id = $1, batch_size = $2, lease_host = $3,
        dispatched_at = $4, started_at = NULL, route = $5, updated_at = $4 WHERE seq = ANY($6) AND status = 'queued'`, [batchId, seqs.length, host, now, route, seqs]);
      return new Set(seqs);
    },
    markRunning: (seqs, now) => write(`UPDATE jobs SET status = 'running', started_at = $1, updated_at = $1 WHERE seq = ANY($2) AND status = 'dispatched'`, [now, seqs]),
    requeueJob: (seq, now) => {
      write(`UPDATE jobs SET status = 'queued', lease_host = NULL, updated_at = $1 WHERE seq = $2 AND status IN ('dispatched', 'running')`, [now, seq]);
      return true;
    },
    releaseJob: (seq, input, now) => {
      write(`UPDATE jobs SET status = 'queued', input = $1, updated_at = $2 WHERE seq = $3 AND status = 'waiting'`, [JSON.stringify(input), now, seq]);
      return true;
    },
    recordCaps: (jobId, caps) => write(
      'INSERT INTO job_caps (job_id, caps) VALUES ($1, $2) ON CONFLICT (job_id) DO UPDATE SET caps = EXCLUDED.caps', [jobId, JSON.stringify(caps)],
    ),
    capsOf: async (jobId) => {
      const [row] = await read<{ caps: string }>('SELECT caps FROM job_caps WHERE job_id = $1', [jobId]);
      return row ? JSON.parse(row.caps) as JobCaps : null;
    },
    finishJob: (seq, status, now, outcome = {}) => {
      const result = resultText(outcome);
      const { attempt } = outcome;
      if (attempt) {
        // A turn's successes (a batch's jobs) are one UPDATE of many rows (pg-commits.ts, coalesced).
        write(`UPDATE jobs SET status = $2, finished_at = $3, updated_at = $3, lease_host = NULL, result = $4, error_code = NULL,
            error_message = NULL, attempt_host = $5, started_at = $6, load_ms = $7, compute_ms = $8
          WHERE seq = $1 AND status IN ('waiting', 'queued', 'dispatched', 'running')`, [seq, status, now, result, attempt.host, attempt.startedAt, attempt.loadMs, attempt.computeMs], SUCCEEDED_ROWS);
      } else {
        write(`UPDATE jobs SET status = $1, finished_at = $2, updated_at = $2, lease_host = NULL, result = $3, error_code = $4, error_message = $5
          WHERE seq = $6 AND status IN ('waiting', 'queued', 'dispatched', 'running')`, [status, now, result, outcome.errorCode ?? null, outcome.errorMessage ?? null, seq]);
      }
      return true;
    },
    getJob: async (id) => (await read<JobRow>('SELECT * FROM jobs WHERE id = $1', [id])).map(jobFromRow)[0] ?? null,
    getJobByIdempotencyKey: async (grantId, key, since) =>
      (await read<JobRow>('SELECT * FROM jobs WHERE grant_id = $1 AND idempotency_key = $2 AND created_at >= $3', [grantId, key, since])).map(jobFromRow)[0] ?? null,
    idempotencyEntry: async (grantId, key, since) => {
      const [row] = await read<{ id: string; request_hash: string | null }>(
        'SELECT id, request_hash FROM jobs WHERE grant_id = $1 AND idempotency_key = $2 AND created_at >= $3', [grantId, key, since]);
      return row ? { id: row.id, requestHash: row.request_hash } : null;
    },
    listJobs: async (filter) => {
      const where = new Where();
      where.in('status', filter.statuses);
      where.in('type', filter.types);
      if (filter.models?.length) where.models('model', filter.models);
      else where.in('model', filter.models);
      where.in('album', filter.albums);
      if (filter.beforeSeq !== undefined) where.add('seq < ?', filter.beforeSeq);
      return (await read<JobRow>(`SELECT * FROM jobs ${where.sql()} ORDER BY seq DESC LIMIT ${where.next()}`, [...where.values, filter.limit])).map(jobFromRow);
    },
    jobsInStates: async (statuses) => (await read<JobRow>('SELECT * FROM jobs WHERE status = ANY($1) ORDER BY seq', [statuses])).map(jobFromRow),
    deviceMsByGrant: async (since) => new Map((await read<{ grant_id: string; ms: number }>(
      `SELECT grant_id, SUM(compute_ms / GREATEST(COALESCE(batch_size, 1), 1))::float8 AS ms FROM jobs
        WHERE status = 'succeeded' AND finished_at >= $1 AND compute_ms IS NOT NULL GROUP BY grant_id`, [since])).map((row) => [row.grant_id, Number(row.ms)])),
    countByStatus: async () => Object.fromEntries((await read<{ status: string; n: number }>('SELECT status, COUNT(*) AS n FROM jobs GROUP BY status')).map((row) => [row.status, row.n])),
    prunableJobs: async (before, limit) => {
      const ids = (await read<{ id: string }>(`SELECT id FROM jobs WHERE status IN ('succeeded', 'failed', 'cancelled', 'expired') AND finished_at < $1
        AND NOT EXISTS (SELECT 1 FROM artifacts WHERE artifacts.job_id = jobs.id) ORDER BY seq LIMIT $2`, [before, limit])).map((row) => row.id);
      if (ids.length === 0) return { ids, digests: [] };
      const named = await read<{ digest: string }>('SELECT digest FROM uploads WHERE job_id = ANY($1) UNION SELECT digest FROM job_inputs WHERE job_id = ANY($1)', [ids]);
      return { ids, digests: named.map((row) => row.digest) };
    },
    deleteJobs: (ids) => {
      if (ids.length === 0) return;
      for (const table of ['attempts', 'uploads', 'job_inputs', 'job_caps']) write(`DELETE FROM ${table} WHERE job_id = ANY($1)`, [[...ids]]);
      write('DELETE FROM jobs WHERE id = ANY($1)', [[...ids]]);
    },
  };
}
