import { auditConditions, auditFromRow, auditValues, type AuditFilter, type AuditRecord, type AuditRow, type AuditTable, type NewAuditRecord } from '../contract/audit.js';
import { stmt, type Db } from './db.js';

export function insertAudit(db: Db, entry: NewAuditRecord): void {
  stmt(db, `INSERT INTO audit (at, event, grant_id, actor, route, client, status, code, detail)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`).run(...auditValues(entry));
}

/**
 * Newest first; `beforeSeq` is the page cursor. A filter adds conditions (a handful of shapes, each one prepared
 * statement); the log is bounded (`audit.maxRows`), so a scan from the newest entry stays cheap.
 */
export function listAudit(db: Db, query: { limit: number; beforeSeq?: number } & AuditFilter): AuditRecord[] {
  const conditions = auditConditions(query);
  const where = conditions.map(([clause]) => clause);
  const sql = `SELECT * FROM audit${where.length ? ` WHERE ${where.join(' AND ')}` : ''} ORDER BY seq DESC LIMIT ?`;
  return (stmt(db, sql).all(...conditions.map(([, value]) => value), query.limit) as AuditRow[]).map(auditFromRow);
}

/** Delete entries older than `before` and all but the newest `keepRows`; returns how many went. */
export function pruneAudit(db: Db, before: number, keepRows: number): number {
  const old = stmt(db, 'DELETE FROM audit WHERE at < ?').run(before).changes;
  const excess = stmt(db, 'DELETE FROM audit WHERE seq <= (SELECT seq FROM audit ORDER BY seq DESC LIMIT 1 OFFSET ?)').run(keepRows).changes;
  return old + excess;
}

/** The audit table on one connection. */
export function auditTable(db: Db): AuditTable {
  return {
    insertAudit: (entry) => insertAudit(db, entry),
    pruneAudit: (before, keepRows) => void pruneAudit(db, before, keepRows),
    listAudit: async (query) => listAudit(db, query),
  };
}
