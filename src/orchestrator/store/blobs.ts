import { stmt, type Db } from './db.js';

export interface BlobRecord {
  digest: string;
  bytes: number;
  mediaType: string;
}

export function recordBlob(db: Db, blob: BlobRecord, now: number): void {
  stmt(db, 'INSERT OR IGNORE INTO blobs (digest, bytes, media_type, created_at) VALUES (?, ?, ?, ?)').run(
    blob.digest, blob.bytes, blob.mediaType, now,
  );
}

export function getBlob(db: Db, digest: string): BlobRecord | null {
  const row = stmt(db, 'SELECT digest, bytes, media_type FROM blobs WHERE digest = ?').get(digest) as
    { digest: string; bytes: number; media_type: string } | undefined;
  return row ? { digest: row.digest, bytes: row.bytes, mediaType: row.media_type } : null;
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
