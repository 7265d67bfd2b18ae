import { stagedUploadFromRow, type StagedUploadRow, type StagedUploadTable } from '../contract/staged-uploads.js';
import type { PgAccess } from './access.js';

/** The staged_uploads table in PostgreSQL. */
export function stagedUploadTable({ write, read }: PgAccess): StagedUploadTable {
  return {
    insertStagedUpload: (upload) => write('INSERT INTO staged_uploads (id, grant_id, total, created_at) VALUES ($1, $2, $3, $4)', [upload.id, upload.grantId, upload.total, upload.createdAt]),
    deleteStagedUpload: (id) => write('DELETE FROM staged_uploads WHERE id = $1', [id]),
    getStagedUpload: async (id) => (await read<StagedUploadRow>('SELECT id, grant_id, total, created_at FROM staged_uploads WHERE id = $1', [id])).map(stagedUploadFromRow)[0] ?? null,
    countStagedUploads: async (grantId) => Number((await read<{ n: string }>('SELECT COUNT(*) AS n FROM staged_uploads WHERE grant_id = $1', [grantId]))[0]!.n),
    stagedUploadsBefore: async (before) => (await read<StagedUploadRow>('SELECT id, grant_id, total, created_at FROM staged_uploads WHERE created_at < $1', [before])).map(stagedUploadFromRow),
  };
}
