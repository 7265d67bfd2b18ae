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

/** The audit table: the log written through the group commit, pruned by retention. */
export interface AuditTable {
  insertAudit(entry: NewAuditRecord): void;
  /** Delete entries older than `before` and all but the newest `keepRows`. */
  pruneAudit(before: number, keepRows: number): void;
  /** Newest first; `beforeSeq` is the page cursor. */
  listAudit(query: { limit: number; beforeSeq?: number } & AuditFilter): Promise<AuditRecord[]>;
}

export interface AuditRow {
  seq: number; at: number; event: string; grant_id: string | null; actor: string | null; route: string | null;
  client: string | null; status: number | null; code: string | null; detail: string | null;
}

export const auditFromRow = (row: AuditRow): AuditRecord => ({
  seq: row.seq, at: row.at, event: row.event, grantId: row.grant_id, actor: row.actor, route: row.route,
  client: row.client, status: row.status, code: row.code, detail: row.detail,
});

/** The values of an entry's INSERT, in the column order both stores write them. */
export const auditValues = (entry: NewAuditRecord): unknown[] =>
  [entry.at, entry.event, entry.grantId, entry.actor, entry.route, entry.client, entry.status, entry.code, entry.detail];

/** A listing's conditions, column by column, in the order both stores add them (each `column op ?`). */
export function auditConditions(query: { beforeSeq?: number } & AuditFilter): [clause: string, value: unknown][] {
  const conditions: [string, unknown][] = [];
  if (query.beforeSeq !== undefined) conditions.push(['seq < ?', query.beforeSeq]);
  if (query.event !== undefined) conditions.push(['event = ?', query.event]);
  if (query.actor !== undefined) conditions.push(['actor = ?', query.actor]);
  if (query.grantId !== undefined) conditions.push(['grant_id = ?', query.grantId]);
  if (query.since !== undefined) conditions.push(['at >= ?', query.since]);
  return conditions;
}
