import { blobFromRow, unnamedPage, type BlobRecord, type BlobRow, type BlobTable } from '../contract/blobs.js';
import { stmt, type Db } from './db.js';

export function recordBlob(db: Db, blob: BlobRecord, now: number): void {
  stmt(db, 'INSERT OR IGNORE INTO blobs (digest, bytes, media_type, created_at) VALUES (?, ?, ?, ?)').run(
    blob.digest, blob.bytes, blob.mediaType, now,
  );
}

export function getBlob(db: Db, digest: string): BlobRecord | null {
  const row = stmt(db, 'SELECT digest, bytes, media_type FROM blobs WHERE digest = ?').get(digest) as BlobRow | undefined;
  return row ? blobFromRow(row) : null;
}

/** Remember that a job's upload grant delivered this blob; publishing checks it. */
export function recordUpload(db: Db, jobId: string, digest: string, now: number): void {
  stmt(db, 'INSERT OR IGNORE INTO uploads (job_id, digest, created_at) VALUES (?, ?, ?)').run(jobId, digest, now);
}

export function wasUploadedFor(db: Db, jobId: string, digest: string): boolean {
  return stmt(db, 'SELECT 1 FROM uploads WHERE job_id = ? AND digest = ?').get(jobId, digest) !== undefined;
}

/** Forget that a job's outputs were uploaded for it (its published results were deleted: it names them no more). */
export function forgetUploads(db: Db, jobId: string, digests: readonly string[]): void {
  const forget = stmt(db, 'DELETE FROM uploads WHERE job_id = ? AND digest = ?');
  for (const digest of digests) forget.run(jobId, digest);
}

/**
 * Whether any row names the blob: a published result, an output uploaded for a job, a client's stored file, a job's
 * input. Models name theirs in the registry (BlobReclaimer asks it).
 */
export function blobNamed(db: Db, digest: string): boolean {
  return stmt(db, `SELECT 1 WHERE EXISTS (SELECT 1 FROM artifacts WHERE digest = @digest) OR EXISTS (SELECT 1 FROM uploads WHERE digest = @digest)
    OR EXISTS (SELECT 1 FROM client_blobs WHERE digest = @digest) OR EXISTS (SELECT 1 FROM job_inputs WHERE digest = @digest)`).get({ digest }) !== undefined;
}

/** The blob's record goes with its bytes (reclaimed). */
export function deleteBlob(db: Db, digest: string): void {
  stmt(db, 'DELETE FROM blobs WHERE digest = ?').run(digest);
}

/** Whether a row names `digest` (the four tables `blobNamed` asks), as an SQL expression over `blobs.digest`. */
const NAMED = `EXISTS (SELECT 1 FROM artifacts a WHERE a.digest = blobs.digest) OR EXISTS (SELECT 1 FROM uploads u WHERE u.digest = blobs.digest)
  OR EXISTS (SELECT 1 FROM client_blobs c WHERE c.digest = blobs.digest) OR EXISTS (SELECT 1 FROM job_inputs i WHERE i.digest = blobs.digest)`;

/**
 * A page of the blob records in digest order after `after` (`limit` records looked at), with those no row names: the
 * candidates of a sweep for blobs nothing names (a model may still; the reclaimer asks the registry). `last` is the
 * last digest looked at (the next page's `after`), null at the end.
 */
export function unnamedBlobs(db: Db, after: string | null, limit: number): { unnamed: string[]; last: string | null } {
  const rows = stmt(db, `SELECT digest, (${NAMED}) AS named FROM blobs WHERE digest > ? ORDER BY digest LIMIT ?`).all(after ?? '', limit) as { digest: string; named: number }[];
  return unnamedPage(rows, limit);
}

/** How many blobs are recorded, and their bytes: what the store holds (a model's index aside, which has no record). */
export function blobTotals(db: Db): { count: number; bytes: number } {
  const row = stmt(db, 'SELECT COUNT(*) AS count, COALESCE(SUM(bytes), 0) AS bytes FROM blobs').get() as { count: number; bytes: number };
  return { count: row.count, bytes: row.bytes };
}

/** The blobs and uploads tables on one connection. */
export function blobTable(db: Db): BlobTable {
  return {
    recordBlob: (blob, now) => recordBlob(db, blob, now),
    recordUpload: (jobId, digest, now) => recordUpload(db, jobId, digest, now),
    getBlob: async (digest) => getBlob(db, digest),
    wasUploadedFor: async (jobId, digest) => wasUploadedFor(db, jobId, digest),
    forgetUploads: (jobId, digests) => forgetUploads(db, jobId, digests),
    blobNamed: async (digest) => blobNamed(db, digest),
    deleteBlob: (digest) => deleteBlob(db, digest),
    unnamedBlobs: async (after, limit) => unnamedBlobs(db, after, limit),
    blobTotals: async () => blobTotals(db),
  };
}
