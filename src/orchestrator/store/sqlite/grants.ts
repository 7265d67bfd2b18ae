import { stmt, type Db } from './db.js';

/** A grant the orchestrator minted and recorded (upload grants, minted per job, are not recorded). */
export interface GrantRecord {
  id: string;
  kind: string;
  note: string | null;
  /** The caveat lines it was minted with (null for grants recorded before they were kept). */
  caveats: string[] | null;
  createdAt: number;
  revokedAt: number | null;
}

export interface GrantRow { id: string; kind: string; note: string | null; caveats: string | null; created_at: number; revoked_at: number | null }

export const grantFromRow = (row: GrantRow): GrantRecord => ({
  id: row.id, kind: row.kind, note: row.note, caveats: row.caveats === null ? null : (JSON.parse(row.caveats) as string[]),
  createdAt: row.created_at, revokedAt: row.revoked_at,
});

export function recordGrant(db: Db, grant: { id: string; kind: string; note: string | null; caveats: readonly string[] }, now: number): void {
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
