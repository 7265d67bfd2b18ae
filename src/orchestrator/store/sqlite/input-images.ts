import { stmt, type Db } from './db.js';

/** What decoding a picture found: its format and size, or why it was refused. */
export type ImageVerdict =
  | { ok: true; format: string; width: number; height: number }
  | { ok: false; refusal: string };

interface VerdictRow {
  format: string | null;
  width: number | null;
  height: number | null;
  refusal: string | null;
}

/** The verdict recorded for a digest, if it was ever decoded. */
export function verdictOf(db: Db, digest: string): ImageVerdict | undefined {
  const row = stmt(db, 'SELECT format, width, height, refusal FROM input_images WHERE digest = ?').get(digest) as VerdictRow | undefined;
  if (!row) return undefined;
  return row.refusal !== null ? { ok: false, refusal: row.refusal } : { ok: true, format: row.format!, width: row.width!, height: row.height! };
}

/** Record a verdict; the same bytes decode the same way, so the first one stands. */
export function recordVerdict(db: Db, digest: string, verdict: ImageVerdict, now: number): void {
  stmt(db, 'INSERT OR IGNORE INTO input_images (digest, format, width, height, refusal, checked_at) VALUES (?, ?, ?, ?, ?, ?)').run(
    digest, verdict.ok ? verdict.format : null, verdict.ok ? verdict.width : null, verdict.ok ? verdict.height : null,
    verdict.ok ? null : verdict.refusal, now,
  );
}

/** The picture's bytes left the store (reclaimed): its verdict goes with them, so admission finds no picture there. */
export function forgetVerdict(db: Db, digest: string): void {
  stmt(db, 'DELETE FROM input_images WHERE digest = ?').run(digest);
}

/** The job names this picture as an input (the host that runs it may then read it). */
export function recordJobInput(db: Db, digest: string, jobId: string): void {
  stmt(db, 'INSERT OR IGNORE INTO job_inputs (digest, job_id) VALUES (?, ?)').run(digest, jobId);
}

/** Whether a job now dispatched to or running on one of these hosts (any host: null) names the picture. */
export function inputOfJobOn(db: Db, digest: string, hosts: readonly string[] | null): boolean {
  const rows = stmt(db, `
    SELECT j.lease_host AS host FROM job_inputs i JOIN jobs j ON j.id = i.job_id
    WHERE i.digest = ? AND j.status IN ('dispatched', 'running')
  `).all(digest) as { host: string | null }[];
  return rows.some((row) => row.host !== null && (hosts === null || hosts.includes(row.host)));
}
