import type { AttemptView, RouteView } from '../../protocol/api/index.js';
import { stmt, type Db } from './db.js';

/** An attempt that has ended, written once: the attempt in flight lives on its job's row until then. */
export interface EndedAttempt {
  jobId: string;
  n: number;
  host: string;
  batchId: string;
  batchSize: number;
  status: Exclude<AttemptView['status'], 'running'>;
  dispatchedAt: number;
  startedAt: number | null;
  finishedAt: number;
  loadMs?: number | null;
  computeMs?: number;
  errorCode?: string;
  errorMessage?: string;
  /** The routing decision that sent it there, encoded (routing/route-log.ts). */
  route?: string | null;
}

export function recordAttempt(db: Db, attempt: EndedAttempt, model: string): void {
  stmt(db, `INSERT OR IGNORE INTO attempts (job_id, n, host, replica, batch_id, batch_size, status, dispatched_at, started_at, finished_at,
    load_ms, compute_ms, error_code, error_message, route) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`).run(
    attempt.jobId, attempt.n, attempt.host, `${attempt.host}/${model}`, attempt.batchId, attempt.batchSize, attempt.status,
    attempt.dispatchedAt, attempt.startedAt, attempt.finishedAt, attempt.loadMs ?? null, attempt.computeMs ?? null, attempt.errorCode ?? null, attempt.errorMessage ?? null,
    attempt.route ?? null,
  );
}

export interface AttemptRow {
  n: number; host: string; replica: string; batch_id: string; batch_size: number; status: string; dispatched_at: number;
  started_at: number | null; finished_at: number | null; load_ms: number | null; compute_ms: number | null; error_code: string | null; error_message: string | null;
  route: string | null;
}

const iso = (ms: number | null): string | null => (ms === null ? null : new Date(ms).toISOString());

/** A job's ended attempts, oldest first; `decodeRoute` reads the stored routing decision. */
export function listAttempts(db: Db, jobId: string, decodeRoute: (text: string | null) => RouteView | null = () => null): AttemptView[] {
  const rows = stmt(db, 'SELECT * FROM attempts WHERE job_id = ? ORDER BY n').all(jobId) as AttemptRow[];
  return rows.map((row) => attemptFromRow(row, decodeRoute));
}

/** An ended attempt's row as the API shows it; `decodeRoute` reads the stored routing decision. */
export function attemptFromRow(row: AttemptRow, decodeRoute: (text: string | null) => RouteView | null): AttemptView {
  return ({
    n: row.n, host: row.host, replica: row.replica, batchId: row.batch_id, batchSize: row.batch_size,
    status: row.status as AttemptView['status'], dispatchedAt: new Date(row.dispatched_at).toISOString(),
    startedAt: iso(row.started_at), finishedAt: iso(row.finished_at), loadMs: row.load_ms, computeMs: row.compute_ms,
    error: row.error_code ? { code: row.error_code, message: row.error_message ?? '' } : null,
    route: decodeRoute(row.route),
  });
}
