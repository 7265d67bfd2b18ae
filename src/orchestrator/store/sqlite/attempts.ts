import type { AttemptView } from '../../../protocol/api/index.js';
import { attemptFromRow, replicaOf, type AttemptRow, type AttemptTable, type EndedAttempt, type RouteDecoder } from '../contract/attempts.js';
import { stmt, type Db } from './db.js';

export function recordAttempt(db: Db, attempt: EndedAttempt, model: string): void {
  stmt(db, `INSERT OR IGNORE INTO attempts (job_id, n, host, replica, batch_id, batch_size, status, dispatched_at, started_at, finished_at,
    load_ms, compute_ms, error_code, error_message, route) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`).run(
    attempt.jobId, attempt.n, attempt.host, replicaOf(attempt, model), attempt.batchId, attempt.batchSize, attempt.status,
    attempt.dispatchedAt, attempt.startedAt, attempt.finishedAt, attempt.loadMs ?? null, attempt.computeMs ?? null, attempt.errorCode ?? null, attempt.errorMessage ?? null,
    attempt.route ?? null,
  );
}

/** A job's ended attempts, oldest first; `decodeRoute` reads the stored routing decision. */
export function listAttempts(db: Db, jobId: string, decodeRoute: RouteDecoder = () => null): AttemptView[] {
  const rows = stmt(db, 'SELECT * FROM attempts WHERE job_id = ? ORDER BY n').all(jobId) as AttemptRow[];
  return rows.map((row) => attemptFromRow(row, decodeRoute));
}

/** The attempts table on one connection. */
export function attemptTable(db: Db): AttemptTable {
  return {
    recordAttempt: (attempt, model) => recordAttempt(db, attempt, model),
    listAttempts: async (jobId, decodeRoute) => listAttempts(db, jobId, decodeRoute),
  };
}
