import { stmt, type Db } from './db.js';

export function recordGrant(db: Db, grant: { id: string; kind: string; note: string | null }, now: number): void {
  stmt(db, 'INSERT INTO grants (id, kind, note, created_at) VALUES (?, ?, ?, ?)').run(grant.id, grant.kind, grant.note, now);
}

export function revokeGrant(db: Db, id: string, now: number): boolean {
  return stmt(db, 'UPDATE grants SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL').run(now, id).changes === 1;
}

export function revokedGrantIds(db: Db): string[] {
  return (stmt(db, 'SELECT id FROM grants WHERE revoked_at IS NOT NULL').all() as { id: string }[]).map((row) => row.id);
}
