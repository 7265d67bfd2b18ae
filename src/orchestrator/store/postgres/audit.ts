import { auditConditions, auditFromRow, auditValues, type AuditRow, type AuditTable } from '../contract/audit.js';
import { marks, Where, type PgAccess } from './access.js';

/** The audit table in PostgreSQL. */
export function auditTable({ write, read }: PgAccess): AuditTable {
  return {
    insertAudit: (entry) => write(`INSERT INTO audit (at, event, grant_id, actor, route, client, status, code, detail) VALUES (${marks(9)})`, auditValues(entry)),
    pruneAudit: (before, keepRows) => {
      write('DELETE FROM audit WHERE at < $1', [before]);
      write('DELETE FROM audit WHERE seq <= (SELECT seq FROM audit ORDER BY seq DESC LIMIT 1 OFFSET $1)', [keepRows]);
    },
    listAudit: async (query) => {
      const where = new Where();
      for (const [clause, value] of auditConditions(query)) where.add(clause, value);
      return (await read<AuditRow>(`SELECT * FROM audit ${where.sql()} ORDER BY seq DESC LIMIT ${where.next()}`, [...where.values, query.limit])).map(auditFromRow);
    },
  };
}
