import { stmt, type Db } from './db.js';

/** An upload in progress: its bytes so far are a file (the blob store's staging folder), its size the offset. */
export interface StagedUploadRecord {
  id: string;
  grantId: string;
  /** The size the client announced, if it did. */
  total: number | null;
  createdAt: number;
}

export function insertStagedUpload(db: Db, upload: StagedUploadRecord): void {
  stmt(db, 'INSERT INTO staged_uploads (id, grant_id, total, created_at) VALUES (?, ?, ?, ?)').run(upload.id, upload.grantId, upload.total, upload.createdAt);
}

export function getStagedUpload(db: Db, id: string): StagedUploadRecord | null {
  const row = stmt(db, 'SELECT id, grant_id, total, created_at FROM staged_uploads WHERE id = ?').get(id) as
    { id: string; grant_id: string; total: number | null; created_at: number } | undefined;
  return row ? { id: row.id, grantId: row.grant_id, total: row.total, createdAt: row.created_at } : null;
}

export function deleteStagedUpload(db: Db, id: string): void {
  stmt(db, 'DELETE FROM staged_uploads WHERE id = ?').run(id);
}

/** How many uploads a grant lineage has open (started, neither completed nor given up): its cap is checked with it. */
export function countStagedUploads(db: Db, grantId: string): number {
  return (stmt(db, 'SELECT COUNT(*) AS n FROM staged_uploads WHERE grant_id = ?').get(grantId) as { n: number }).n;
}

/** Uploads started before `before` (abandoned ones are swept). */
export function stagedUploadsBefore(db: Db, before: number): StagedUploadRecord[] {
  return (stmt(db, 'SELECT id, grant_id, total, created_at FROM staged_uploads WHERE created_at < ?').all(before) as
    { id: string; grant_id: string; total: number | null; created_at: number }[])
    .map((row) => ({ id: row.id, grantId: row.grant_id, total: row.total, createdAt: row.created_at }));
}
