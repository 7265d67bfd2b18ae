import { stmt, type Db } from './db.js';

/** One line of the audit log; times are epoch milliseconds. */
export interface AuditRecord {
  seq: number;
  at: number;
  /** `grant:minted`, `grant:revoked`, `request:refused`, `admin:action`. */
  event: string;
  /** The grant the entry is about: the one minted, revoked, or presented with a refused request. */
  grantId: string | null;
  /** The grant that did it (minting, revoking, an admin action); null for the orchestrator itself. */
  actor: string | null;
  /** `METHOD /path`, never the query string (which may hold a grant). */
  route: string | null;
  client: string | null;
  status: number | null;
  code: string | null;
  detail: string | null;
}

export type NewAuditRecord = Omit<AuditRecord, 'seq'>;

export interface AuditRow {
  seq: number; at: number; event: string; grant_id: string | null; actor: string | null; route: string | null;
  client: string | null; status: number | null; code: string | null; detail: string | null;
}

export const auditFromRow = (row: AuditRow): AuditRecord => ({
  seq: row.seq, at: row.at, event: row.event, grantId: row.grant_id, actor: row.actor, route: row.route,
  client: row.client, status: row.status, code: row.code, detail: row.detail,
});

export function insertAudit(db: Db, entry: NewAuditRecord): void {
  stmt(db, `INSERT INTO audit (at, event, grant_id, actor, route, client, status, code, detail)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`).run(
    entry.at, entry.event, entry.grantId, entry.actor, entry.route, entry.client, entry.status, entry.code, entry.detail,
  );
}

/** Which entries a listing keeps: all of them when empty. */
export interface AuditFilter {
  event?: string;
  /** The grant that did it. */
  actor?: string;
  /** The grant it is about. */
  grantId?: string;
  /** At or after this time (epoch ms). */
  since?: number;
}

/**
 * Newest first; `beforeSeq` is the page cursor. A filter adds conditions (a handful of shapes, each one prepared
 * statement); the log is bounded (`audit.maxRows`), so a scan from the newest entry stays cheap.
 */
export function listAudit(db: Db, query: { limit: number; beforeSeq?: number } & AuditFilter): AuditRecord[] {
  const where: string[] = [];
  const values: unknown[] = [];
  const add = (clause: string, value: unknown): void => {
    where.push(clause);
    values.push(value);
  };
  if (query.beforeSeq !== undefined) add('seq < ?', query.beforeSeq);
  if (query.event !== undefined) add('event = ?', query.event);
  if (query.actor !== undefined) add('actor = ?', query.actor);
  if (query.grantId !== undefined) add('grant_id = ?', query.grantId);
  if (query.since !== undefined) add('at >= ?', query.since);
  const sql = `SELECT * FROM audit${where.length ? ` WHERE ${where.join(' AND ')}` : ''} ORDER BY seq DESC LIMIT ?`;
  return (stmt(db, sql).all(...values, query.limit) as AuditRow[]).map(auditFromRow);
}

/** Delete entries older than `before` and all but the newest `keepRows`; returns how many went. */
export function pruneAudit(db: Db, before: number, keepRows: number): number {
  const old = stmt(db, 'DELETE FROM audit WHERE at < ?').run(before).changes;
  const excess = stmt(db, 'DELETE FROM audit WHERE seq <= (SELECT seq FROM audit ORDER BY seq DESC LIMIT 1 OFFSET ?)').run(keepRows).changes;
  return old + excess;
}
