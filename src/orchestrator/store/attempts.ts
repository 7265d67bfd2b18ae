import type { AttemptView } from '../../protocol/index.js';
import { stmt, type Db } from './db.js';

export interface NewAttempt {
  jobId: string;
  n: number;
  host: string;
  replica: string;
  batchId: string;
  batchSize: number;
  dispatchedAt: number;
}

export function insertAttempt(db: Db, attempt: NewAttempt): void {
  stmt(db, `INSERT INTO attempts (job_id, n, host, replica, batch_id, batch_size, status, dispatched_at)
    VALUES (?, ?, ?, ?, ?, ?, 'running', ?)`).run(
    attempt.jobId, attempt.n, attempt.host, attempt.replica, attempt.batchId, attempt.batchSize, attempt.dispatchedAt,
  );
}

export function markBatchStarted(db: Db, batchId: string, now: number): void {
  stmt(db, `UPDATE attempts SET started_at = ? WHERE batch_id = ? AND status = 'running' AND started_at IS NULL`).run(now, batchId);
}

export function finishAttempt(
  db: Db, jobId: string, batchId: string, status: AttemptView['status'], now: number,
  outcome: { computeMs?: number; errorCode?: string; errorMessage?: string } = {},
): void {
  stmt(db, `UPDATE attempts SET status = ?, finished_at = ?, compute_ms = ?, error_code = ?, error_message = ?
    WHERE job_id = ? AND batch_id = ? AND status = 'running'`).run(
    status, now, outcome.computeMs ?? null, outcome.errorCode ?? null, outcome.errorMessage ?? null, jobId, batchId,
  );
}

interface AttemptRow {
  n: number; host: string; replica: string; batch_id: string; batch_size: number; status: string; dispatched_at: number;
  started_at: number | null; finished_at: number | null; compute_ms: number | null; error_code: string | null; error_message: string | null;
}

const iso = (ms: number | null): string | null => (ms === null ? null : new Date(ms).toISOString());

export function listAttempts(db: Db, jobId: string): AttemptView[] {
  const rows = stmt(db, 'SELECT * FROM attempts WHERE job_id = ? ORDER BY n').all(jobId) as AttemptRow[];
  return rows.map((row) => ({
    n: row.n, host: row.host, replica: row.replica, batchId: row.batch_id, batchSize: row.batch_size,
    status: row.status as AttemptView['status'], dispatchedAt: new Date(row.dispatched_at).toISOString(),
    startedAt: iso(row.started_at), finishedAt: iso(row.finished_at), computeMs: row.compute_ms,
    error: row.error_code ? { code: row.error_code, message: row.error_message ?? '' } : null,
  }));
}
