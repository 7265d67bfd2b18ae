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

/** A grant as it is minted, before it is recorded. */
export interface NewGrant {
  id: string;
  kind: string;
  note: string | null;
  caveats: readonly string[];
}

/** The grants table: grants minted, revoked and listed; the revoked ones are read once at start. */
export interface GrantTable {
  recordGrant(grant: NewGrant, now: number): void;
  /** False when the grant was already revoked (or is unknown). */
  revokeGrant(id: string, now: number): boolean;
  getGrant(id: string): Promise<GrantRecord | null>;
  revokedGrantIds(): Promise<string[]>;
  /** Recorded grants, newest first; `before` is the (createdAt, id) of the last one of the previous page. */
  listGrants(query: { limit: number; before?: { createdAt: number; id: string } }): Promise<GrantRecord[]>;
}

export interface GrantRow { id: string; kind: string; note: string | null; caveats: string | null; created_at: number; revoked_at: number | null }

export const grantFromRow = (row: GrantRow): GrantRecord => ({
  id: row.id, kind: row.kind, note: row.note, caveats: row.caveats === null ? null : (JSON.parse(row.caveats) as string[]),
  createdAt: row.created_at, revokedAt: row.revoked_at,
});
