import { grantFromRow, type GrantRecord, type GrantRow, type GrantTable, type NewGrant } from '../contract/grants.js';
import { stmt, type Db } from './db.js';

export function recordGrant(db: Db, grant: NewGrant, now: number): void {
  stmt(db, 'INSERT INTO grants (id, kind, note, caveats, created_at) VALUES (?, ?, ?, ?, ?)').run(
    grant.id, grant.kind, grant.note, JSON.stringify(grant.caveats), now,
  );
}

export function getGrant(db: Db, id: string): GrantRecord | null {
  const row = stmt(db, 'SELECT * FROM grants WHERE id = ?').get(id) as GrantRow | undefined;
  return row ? grantFromRow(row) : null;
}

/** Returns false when the grant was already revoked (or is unknown). */
export function revokeGrant(db: Db, id: string, now: number): boolean {
  return stmt(db, 'UPDATE grants SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL').run(now, id).changes === 1;
}

export function revokedGrantIds(db: Db): string[] {
  return (stmt(db, 'SELECT id FROM grants WHERE revoked_at IS NOT NULL').all() as { id: string }[]).map((row) => row.id);
}

/** Recorded grants, newest first; `before` is the (createdAt, id) of the last one of the previous page. */
export function listGrants(db: Db, query: { limit: number; before?: { createdAt: number; id: string } }): GrantRecord[] {
  const rows = query.before
    ? stmt(db, 'SELECT * FROM grants WHERE (created_at, id) < (?, ?) ORDER BY created_at DESC, id DESC LIMIT ?')
      .all(query.before.createdAt, query.before.id, query.limit)
    : stmt(db, 'SELECT * FROM grants ORDER BY created_at DESC, id DESC LIMIT ?').all(query.limit);
  return (rows as GrantRow[]).map(grantFromRow);
}

/** The grants table on one connection. */
export function grantTable(db: Db): GrantTable {
  return {
    recordGrant: (grant, now) => recordGrant(db, grant, now),
    revokeGrant: (id, now) => revokeGrant(db, id, now),
    getGrant: async (id) => getGrant(db, id),
    revokedGrantIds: async () => revokedGrantIds(db),
    listGrants: async (query) => listGrants(db, query),
  };
}
