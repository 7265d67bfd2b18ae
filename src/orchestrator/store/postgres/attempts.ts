import { attemptFromRow, replicaOf, type AttemptRow, type AttemptTable } from '../contract/attempts.js';
import { marks, type PgAccess } from './access.js';

/** The attempts table in PostgreSQL. */
export function attemptTable({ write, read }: PgAccess): AttemptTable {
  return {
    recordAttempt: (attempt, model) => write(`INSERT INTO attempts (job_id, n, host, replica, batch_id, batch_size, status, dispatched_at, started_at,
        finished_at, load_ms, compute_ms, error_code, error_message, route) VALUES (${marks(15)}) ON CONFLICT DO NOTHING`, [
      attempt.jobId, attempt.n, attempt.host, replicaOf(attempt, model), attempt.batchId, attempt.batchSize, attempt.status, attempt.dispatchedAt,
      attempt.startedAt, attempt.finishedAt, attempt.loadMs ?? null, attempt.computeMs ?? null, attempt.errorCode ?? null, attempt.errorMessage ?? null,
      attempt.route ?? null,
    ]),
    listAttempts: async (jobId, decodeRoute = () => null) =>
      (await read<AttemptRow>('SELECT * FROM attempts WHERE job_id = $1 ORDER BY n', [jobId])).map((row) => attemptFromRow(row, decodeRoute)),
  };
}
