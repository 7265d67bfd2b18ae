import { placedOn, verdictFromRow, verdictValues, type ImageVerdict, type InputImageTable, type VerdictRow } from '../contract/input-images.js';
import { stmt, type Db } from './db.js';

/** The verdict recorded for a digest, if it was ever decoded. */
export function verdictOf(db: Db, digest: string): ImageVerdict | undefined {
  const row = stmt(db, 'SELECT format, width, height, refusal FROM input_images WHERE digest = ?').get(digest) as VerdictRow | undefined;
  return row ? verdictFromRow(row) : undefined;
}

/** Record a verdict; the same bytes decode the same way, so the first one stands. */
export function recordVerdict(db: Db, digest: string, verdict: ImageVerdict, now: number): void {
  stmt(db, 'INSERT OR IGNORE INTO input_images (digest, format, width, height, refusal, checked_at) VALUES (?, ?, ?, ?, ?, ?)')
    .run(...verdictValues(digest, verdict, now));
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
  return placedOn(rows, hosts);
}

/** The input_images and job_inputs tables on one connection. */
export function inputImageTable(db: Db): InputImageTable {
  return {
    recordVerdict: (digest, verdict, now) => recordVerdict(db, digest, verdict, now),
    recordJobInput: (digest, jobId) => recordJobInput(db, digest, jobId),
    verdictOf: async (digest) => verdictOf(db, digest),
    forgetVerdict: (digest) => forgetVerdict(db, digest),
    inputOfJobOn: async (digest, hosts) => inputOfJobOn(db, digest, hosts),
  };
}
