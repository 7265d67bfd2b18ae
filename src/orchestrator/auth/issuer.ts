import type { Clock } from '../clock.js';
import { grants, type Db, type GroupCommit } from '../store/index.js';
import type { GrantAuthority } from './grants.js';
import type { GrantKind } from './caveats.js';

export interface GrantIssuerDeps {
  db: Db;
  commits: GroupCommit;
  clock: Clock;
  authority: GrantAuthority;
}

/** Mints grants and records each one (id, kind, note) in the store, so it can be listed and revoked. */
export class GrantIssuer {
  readonly #deps: GrantIssuerDeps;

  constructor(deps: GrantIssuerDeps) {
    this.#deps = deps;
  }

  /** Mint a grant; resolves once its record is committed. */
  async mint(kind: GrantKind, caveats: readonly string[], note: string | null): Promise<{ id: string; token: string; caveats: string[] }> {
    const minted = this.mintNow(kind, caveats, note);
    await this.#deps.commits.durable();
    return minted;
  }

  /** Mint without waiting for the commit (start-up, where the next write flushes it). */
  mintNow(kind: GrantKind, caveats: readonly string[], note: string | null): { id: string; token: string; caveats: string[] } {
    const minted = this.#deps.authority.mint(kind, caveats);
    this.#deps.commits.write(() => grants.recordGrant(this.#deps.db, { id: minted.id, kind, note }, this.#deps.clock.now()));
    return minted;
  }
}
