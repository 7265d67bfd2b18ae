import type { GrantCapsView, GrantPage, GrantView } from '../../protocol/api/index.js';
import { MeshError } from '../../protocol/index.js';
import type { AuditLog } from './audit.js';
import type { Clock } from '../../protocol/clock.js';
import type { Commits, GrantRecord, MeshStore } from '../store/index.js';
import { capsOf, type GrantAuthority, type GrantCaps } from './grants.js';
import { parseCaveat, type Caveat, type GrantKind } from './caveats.js';

export interface GrantIssuerDeps {
  store: MeshStore;
  commits: Commits;
  clock: Clock;
  authority: GrantAuthority;
  audit: AuditLog;
  /** Each cap's use by a lineage now (LineageCaps.usage). */
  caps: { usage(lineage: string, caps: GrantCaps): GrantCapsView };
}

/** Who asked, for the audit log: the asking grant's id (null: the orchestrator itself), the route and the client's address. */
export interface RequestOrigin {
  actor: string | null;
  route?: string;
  client?: string;
}

const SELF: RequestOrigin = { actor: null };

const iso = (ms: number | null): string | null => (ms === null ? null : new Date(ms).toISOString());

function encodeGrantCursor(record: GrantRecord): string {
  return Buffer.from(`${record.createdAt}.${record.id}`).toString('base64url');
}

function decodeGrantCursor(cursor: string): { createdAt: number; id: string } {
  const match = /^(\d+)\.([A-Za-z0-9_-]{1,64})$/.exec(Buffer.from(cursor, 'base64url').toString());
  if (!match) throw new MeshError('BAD_REQUEST', { detail: `cursor "${cursor.slice(0, 50)}" is not one this server gave out` });
  return { createdAt: Number(match[1]), id: match[2]! };
}

/**
 * Mints grants and records each one (id, kind, caveats, note) in the store, so
 * it can be listed and revoked; revokes them (in the store, so it survives a
 * restart, and in the authority, so it holds at once). Every mint and revocation
 * goes to the audit log with its origin (by default the orchestrator itself,
 * e.g. the grants `gpumesh up` mints at start).
 */
export class GrantIssuer {
  readonly #deps: GrantIssuerDeps;

  constructor(deps: GrantIssuerDeps) {
    this.#deps = deps;
  }

  /** Mint a grant; resolves once its record is committed. */
  async mint(kind: GrantKind, caveats: readonly string[], note: string | null, origin: RequestOrigin = SELF): Promise<{ id: string; token: string; caveats: string[] }> {
    const minted = this.mintNow(kind, caveats, note, origin);
    await this.#deps.commits.durable();
    return minted;
  }

  /** Mint without waiting for the commit (start-up, where the next write flushes it). */
  mintNow(kind: GrantKind, caveats: readonly string[], note: string | null, origin: RequestOrigin = SELF): { id: string; token: string; caveats: string[] } {
    const { store, commits, clock, authority, audit } = this.#deps;
    const minted = authority.mint(kind, caveats);
    const lines = minted.caveats;
    commits.write(() => store.grants.recordGrant({ id: minted.id, kind, note, caveats: lines }, clock.now()));
    audit.record({ event: 'grant:minted', grantId: minted.id, actor: origin.actor, route: origin.route, client: origin.client, detail: `${lines.join('; ')}${note ? ` (note: ${note})` : ''}` });
    return minted;
  }

  /**
   * Revoke a recorded grant and with it every grant narrowed from it (they
   * share its id). Idempotent: revoking a revoked grant changes nothing.
   * Unknown ids are 404. Refused at once on every route; open event streams
   * and agent links on it are closed by their watchers.
   */
  async revoke(id: string, origin: RequestOrigin = SELF): Promise<GrantView> {
    const { store, commits, clock, authority, audit } = this.#deps;
    const record = await store.grants.getGrant(id);
    if (!record) throw new MeshError('NOT_FOUND', { what: `Grant ${id}` });
    if (record.revokedAt !== null) return this.#view(record);
    const now = clock.now();
    commits.write(() => store.grants.revokeGrant(id, now));
    audit.record({ event: 'grant:revoked', grantId: id, actor: origin.actor, route: origin.route, client: origin.client, detail: `kind ${record.kind}${record.note ? ` (note: ${record.note})` : ''}` });
    authority.revoke(id);
    await commits.durable();
    return this.#view({ ...record, revokedAt: now });
  }

  /** One recorded grant, with its caps and their use now; unknown ids are 404. */
  async show(id: string): Promise<GrantView> {
    const record = await this.#deps.store.grants.getGrant(id);
    if (!record) throw new MeshError('NOT_FOUND', { what: `Grant ${id}` });
    return this.#view(record);
  }

  /** Recorded grants, newest first. */
  async list(query: { limit: number; cursor?: string }): Promise<GrantPage> {
    const records = await this.#deps.store.grants.listGrants({ limit: query.limit, before: query.cursor ? decodeGrantCursor(query.cursor) : undefined });
    const last = records.at(-1);
    return { grants: records.map((record) => this.#view(record)), nextCursor: records.length === query.limit && last ? encodeGrantCursor(last) : null };
  }

  /**
   * A record as the API shows it. Its caps are those it was minted with (the record's caveats): a narrowing's lower cap
   * travels only in its token, where the orchestrator never keeps it.
   */
  #view(record: GrantRecord): GrantView {
    const caveats = (record.caveats ?? []).map(parseCaveat).filter((caveat): caveat is Caveat => typeof caveat !== 'string');
    const usage = this.#deps.caps.usage(record.id, capsOf(caveats));
    return {
      id: record.id, kind: record.kind, note: record.note, caveats: record.caveats,
      createdAt: new Date(record.createdAt).toISOString(), revokedAt: iso(record.revokedAt), caps: usage,
    };
  }
}
