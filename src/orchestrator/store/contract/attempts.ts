import type { AttemptView, RouteView } from '../../../protocol/api/index.js';

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

/** Reads the stored routing decision of an attempt (routing/route-log.ts). */
export type RouteDecoder = (text: string | null) => RouteView | null;

/** The attempts table: the attempts that did not succeed (a succeeded one is kept on its job's row). */
export interface AttemptTable {
  recordAttempt(attempt: EndedAttempt, model: string): void;
  /** A job's ended attempts, oldest first; `decodeRoute` reads the stored routing decision (none: null). */
  listAttempts(jobId: string, decodeRoute?: RouteDecoder): Promise<AttemptView[]>;
}

export interface AttemptRow {
  n: number; host: string; replica: string; batch_id: string; batch_size: number; status: string; dispatched_at: number;
  started_at: number | null; finished_at: number | null; load_ms: number | null; compute_ms: number | null; error_code: string | null; error_message: string | null;
  route: string | null;
}

/** The replica an attempt ran on, as its row names it. */
export const replicaOf = (attempt: EndedAttempt, model: string): string => `${attempt.host}/${model}`;

const iso = (ms: number | null): string | null => (ms === null ? null : new Date(ms).toISOString());

/** An ended attempt's row as the API shows it. */
export function attemptFromRow(row: AttemptRow, decodeRoute: RouteDecoder): AttemptView {
  return ({
    n: row.n, host: row.host, replica: row.replica, batchId: row.batch_id, batchSize: row.batch_size,
    status: row.status as AttemptView['status'], dispatchedAt: new Date(row.dispatched_at).toISOString(),
    startedAt: iso(row.started_at), finishedAt: iso(row.finished_at), loadMs: row.load_ms, computeMs: row.compute_ms,
    error: row.error_code ? { code: row.error_code, message: row.error_message ?? '' } : null,
    route: decodeRoute(row.route),
  });
}
