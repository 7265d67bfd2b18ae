import { stagedUploadFromRow, type StagedUploadRecord, type StagedUploadRow, type StagedUploadTable } from '../contract/staged-uploads.js';
import { stmt, type Db } from './db.js';

export function insertStagedUpload(db: Db, upload: StagedUploadRecord): void {
  stmt(db, 'INSERT INTO staged_uploads (id, grant_id, total, created_at) VALUES (?, ?, ?, ?)').run(upload.id, upload.grantId, upload.total, upload.createdAt);
}

export function getStagedUpload(db: Db, id: string): StagedUploadRecord | null {
  const row = stmt(db, 'SELECT id, grant_id, total, created_at FROM staged_uploads WHERE id = ?').get(id) as StagedUploadRow | undefined;
  return row ? stagedUploadFromRow(row) : null;
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
  return (stmt(db, 'SELECT id, grant_id, total, created_at FROM staged_uploads WHERE created_at < ?').all(before) as StagedUploadRow[]).map(stagedUploadFromRow);
}

/** The staged_uploads table on one connection. */
export function stagedUploadTable(db: Db): StagedUploadTable {
  return {
    insertStagedUpload: (upload) => insertStagedUpload(db, upload),
    deleteStagedUpload: (id) => deleteStagedUpload(db, id),
    getStagedUpload: async (id) => getStagedUpload(db, id),
    countStagedUploads: async (grantId) => countStagedUploads(db, grantId),
    stagedUploadsBefore: async (before) => stagedUploadsBefore(db, before),
  };
}
