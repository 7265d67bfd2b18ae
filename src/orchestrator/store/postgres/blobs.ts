import { blobFromRow, unnamedPage, type BlobRow, type BlobTable } from '../contract/blobs.js';
import type { PgAccess } from './access.js';

/** The blobs and uploads tables in PostgreSQL. */
export function blobTable({ write, read }: PgAccess): BlobTable {
  return {
    recordBlob: (blob, now) => write('INSERT INTO blobs (digest, bytes, media_type, created_at) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING', [blob.digest, blob.bytes, blob.mediaType, now]),
    recordUpload: (jobId, digest, now) => write('INSERT INTO uploads (job_id, digest, created_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING', [jobId, digest, now]),
    getBlob: async (digest) => (await read<BlobRow>('SELECT digest, bytes, media_type FROM blobs WHERE digest = $1', [digest])).map(blobFromRow)[0] ?? null,
    wasUploadedFor: async (jobId, digest) => (await read('SELECT 1 FROM uploads WHERE job_id = $1 AND digest = $2', [jobId, digest])).length > 0,
    forgetUploads: (jobId, digests) => { if (digests.length > 0) write('DELETE FROM uploads WHERE job_id = $1 AND digest = ANY($2)', [jobId, [...digests]]); },
    blobNamed: async (digest) => (await read<{ named: boolean }>(`SELECT EXISTS (SELECT 1 FROM artifacts WHERE digest = $1) OR EXISTS (SELECT 1 FROM uploads WHERE digest = $1)
      OR EXISTS (SELECT 1 FROM client_blobs WHERE digest = $1) OR EXISTS (SELECT 1 FROM job_inputs WHERE digest = $1) AS named`, [digest]))[0]?.named === true,
    deleteBlob: (digest) => write('DELETE FROM blobs WHERE digest = $1', [digest]),
    blobTotals: async () => {
      // SUM of a BIGINT column is NUMERIC, which arrives as text.
      const [row] = await read<{ count: string; bytes: string }>('SELECT COUNT(*) AS count, COALESCE(SUM(bytes), 0) AS bytes FROM blobs');
      return { count: Number(row!.count), bytes: Number(row!.bytes) };
    },
    unnamedBlobs: async (after, limit) => unnamedPage(await read<{ digest: string; named: boolean }>(`SELECT digest, (EXISTS (SELECT 1 FROM artifacts a WHERE a.digest = blobs.digest)
      OR EXISTS (SELECT 1 FROM uploads u WHERE u.digest = blobs.digest) OR EXISTS (SELECT 1 FROM client_blobs c WHERE c.digest = blobs.digest)
      OR EXISTS (SELECT 1 FROM job_inputs i WHERE i.digest = blobs.digest)) AS named FROM blobs WHERE digest > $1 ORDER BY digest LIMIT $2`, [after ?? '', limit]), limit),
  };
}
