import type { ClientBlobTable } from '../contract/client-blobs.js';
import type { PgAccess } from './access.js';

/** The client_blobs table in PostgreSQL. */
export function clientBlobTable({ write, read }: PgAccess): ClientBlobTable {
  return {
    recordClientBlob: (digest, grantId, now) => write('INSERT INTO client_blobs (digest, grant_id, created_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING', [digest, grantId, now]),
    storedBy: async (digest, grantId) => (await read('SELECT 1 FROM client_blobs WHERE digest = $1 AND grant_id = $2', [digest, grantId])).length > 0,
    forgetClientBlob: (digest, grantId) => write('DELETE FROM client_blobs WHERE digest = $1 AND grant_id = $2', [digest, grantId]),
  };
}
