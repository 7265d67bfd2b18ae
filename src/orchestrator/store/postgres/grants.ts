import { grantFromRow, type GrantRow, type GrantTable } from '../contract/grants.js';
import type { PgAccess } from './access.js';

/** The grants table in PostgreSQL; a revocation answers from what it was asked (it writes behind). */
export function grantTable({ write, read }: PgAccess): GrantTable {
  return {
    recordGrant: (grant, now) => write('INSERT INTO grants (id, kind, note, caveats, created_at) VALUES ($1, $2, $3, $4, $5)', [
      grant.id, grant.kind, grant.note, JSON.stringify(grant.caveats), now,
    ]),
    revokeGrant: (id, now) => {
      write('UPDATE grants SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL', [now, id]);
      return true;
    },
    getGrant: async (id) => (await read<GrantRow>('SELECT * FROM grants WHERE id = $1', [id])).map(grantFromRow)[0] ?? null,
    revokedGrantIds: async () => (await read<{ id: string }>('SELECT id FROM grants WHERE revoked_at IS NOT NULL')).map((row) => row.id),
    listGrants: async ({ limit, before }) => (before
      ? await read<GrantRow>('SELECT * FROM grants WHERE (created_at, id) < ($1, $2) ORDER BY created_at DESC, id DESC LIMIT $3', [before.createdAt, before.id, limit])
      : await read<GrantRow>('SELECT * FROM grants ORDER BY created_at DESC, id DESC LIMIT $1', [limit])).map(grantFromRow),
  };
}
