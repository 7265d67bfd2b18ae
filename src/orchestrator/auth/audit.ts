import type { Clock, Timer } from '../../protocol/clock.js';
import { decodeCursor, encodeCursor, type AuditFilter, type AuditRecord, type Commits, type MeshStore, type NewAuditRecord } from '../store/index.js';
import type { AuditView } from '../../protocol/api/index.js';

export interface AuditRetention {
  /** Entries older than this are deleted. */
  days: number;
  /** At most this many entries are kept (the newest). */
  maxRows: number;
}

export interface AuditLogDeps {
  store: MeshStore;
  commits: Commits;
  clock: Clock;
  retention: AuditRetention;
  /** How often old entries are pruned. Default: every 10 minutes. */
  pruneEveryMs?: number;
}

/**
 * What happened: a grant minted or revoked, a request refused for its grant, an admin-only action, a sleeping host sent
 * a Wake-on-LAN packet (the orchestrator's own doing: it makes a machine of someone's start), a front door opened to
 * networks for requests without credentials (at each start while it is open) or closed again.
 */
export const AUDIT_EVENTS = ['grant:minted', 'grant:revoked', 'request:refused', 'admin:action', 'host:woken', 'door:opened', 'door:closed'] as const;
export type AuditEvent = (typeof AUDIT_EVENTS)[number];

export type { AuditView };

const PRUNE_EVERY_MS = 10 * 60_000;
const DAY_MS = 86_400_000;

/**
 * The audit log: grants minted and revoked, requests refused for their grant,
 * admin actions. Entries are written through the group commit (never straight
 * to SQLite from a route), so a burst of refusals costs a few commits, not one
 * each. Growth is bounded: entries older than `retention.days` and all but
 * the newest `retention.maxRows` are pruned at start, on a timer, and whenever
 * a tenth of `maxRows` has been written since the last pruning (so a flood of
 * refused requests cannot outgrow the bound between two timer ticks).
 */
export class AuditLog {
  readonly #deps: AuditLogDeps;
  #sinceLastPrune = 0;
  #timer: Timer | null = null;
  #closed = false;

  constructor(deps: AuditLogDeps) {
    this.#deps = deps;
    this.prune();
    this.#arm();
  }

  record(entry: { event: AuditEvent } & Partial<Omit<NewAuditRecord, 'at' | 'event'>>): void {
    const { store, commits, clock } = this.#deps;
    const full: NewAuditRecord = {
      at: clock.now(), grantId: null, actor: null, route: null, client: null, status: null, code: null, detail: null, ...entry,
    };
    commits.write(() => store.audit.insertAudit(full));
    if (++this.#sinceLastPrune >= Math.max(1, Math.floor(this.#deps.retention.maxRows / 10))) this.prune();
  }

  /** Newest first, narrowed by the filter (`gpumesh audit --event … --actor … --grant … --since …`). */
  async list(query: { limit: number; cursor?: string } & AuditFilter): Promise<{ entries: AuditView[]; nextCursor: string | null }> {
    const { cursor, ...rest } = query;
    const records = await this.#deps.store.audit.listAudit({ ...rest, beforeSeq: cursor ? decodeCursor(cursor) : undefined });
    const last = records.at(-1);
    return { entries: records.map(view), nextCursor: records.length === query.limit && last ? encodeCursor(last.seq) : null };
  }

  /** Delete what the retention no longer keeps. */
  prune(): void {
    const { store, commits, clock, retention } = this.#deps;
    this.#sinceLastPrune = 0;
    commits.write(() => store.audit.pruneAudit(clock.now() - retention.days * DAY_MS, retention.maxRows));
  }

  close(): void {
    this.#closed = true;
    this.#timer?.cancel();
  }

  #arm(): void {
    this.#timer = this.#deps.clock.setTimer(this.#deps.pruneEveryMs ?? PRUNE_EVERY_MS, () => {
      if (this.#closed) return;
      this.prune();
      this.#arm();
    });
  }
}

function view(record: AuditRecord): AuditView {
  return {
    at: new Date(record.at).toISOString(), event: record.event, grantId: record.grantId, actor: record.actor,
    route: record.route, client: record.client, status: record.status, code: record.code, detail: record.detail,
  };
}
