import type { ClientBlobTable } from '../contract/client-blobs.js';
import { stmt, type Db } from './db.js';

/** A client stored this blob with a grant of this lineage (its id): grants of the lineage may name it as an input. */
export function recordClientBlob(db: Db, digest: string, grantId: string, now: number): void {
  stmt(db, 'INSERT OR IGNORE INTO client_blobs (digest, grant_id, created_at) VALUES (?, ?, ?)').run(digest, grantId, now);
}

export function storedBy(db: Db, digest: string, grantId: string): boolean {
  return stmt(db, 'SELECT 1 FROM client_blobs WHERE digest = ? AND grant_id = ?').get(digest, grantId) !== undefined;
}

/** The lineage no longer keeps the file (it deleted it): its record goes. */
export function forgetClientBlob(db: Db, digest: string, grantId: string): void {
  stmt(db, 'DELETE FROM client_blobs WHERE digest = ? AND grant_id = ?').run(digest, grantId);
}

/** The client_blobs table on one connection. */
export function clientBlobTable(db: Db): ClientBlobTable {
  return {
    recordClientBlob: (digest, grantId, now) => recordClientBlob(db, digest, grantId, now),
    storedBy: async (digest, grantId) => storedBy(db, digest, grantId),
    forgetClientBlob: (digest, grantId) => forgetClientBlob(db, digest, grantId),
  };
}
