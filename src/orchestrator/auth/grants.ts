import { createHash, randomBytes } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import { newMacaroon } from 'macaroon';
import { caveatLines, decodeGrant, encodeGrant, GRANT_IDENTIFIER_PREFIX, grantIdOf } from '../../protocol/grant-token.js';
import { MeshError } from '../../protocol/index.js';
import { checkCaveat, formatCaveat, isCap, parseCaveat, scopeProblem, type Caveat, type GrantKind, type GrantRequest } from './caveats.js';


/**
 * One `rate` caveat of a grant, as a limiter. `key` names the caveat *and the
 * chain of caveats before it*: every grant narrowed from the grant the caveat
 * was added to carries the same chain, so they all share this one allowance,
 * while a rate a narrowing adds gets a limiter of its own (see `rateKey`).
 */
export interface GrantRate {
  key: string;
  count: number;
  windowMs: number;
  /** The caveat as written, for messages. */
  caveat: string;
}

/** A cap of a grant's lineage: the tightest caveat of its kind along the chain (a narrowing may only lower it). */
export interface GrantCap {
  limit: number;
  /** The caveat as written, for messages. */
  caveat: string;
}

/** The caps a grant carries; null where it has none. */
export interface GrantCaps {
  /** Jobs of the lineage waiting in a queue at once (`max-queued`). */
  maxQueued: GrantCap | null;
  /** Device-seconds the lineage's jobs may compute per UTC day (`device-seconds-per-day`). */
  deviceSecondsPerDay: GrantCap | null;
}

/** The caps among these caveats (the tightest of each kind). */
export function capsOf(caveats: readonly Caveat[]): GrantCaps {
  const caps: GrantCaps = { maxQueued: null, deviceSecondsPerDay: null };
  for (const caveat of caveats) {
    if (!isCap(caveat)) continue;
    const field = caveat.condition === 'max-queued' ? 'maxQueued' : 'deviceSecondsPerDay';
    if (!caps[field] || caveat.limit < caps[field].limit) caps[field] = { limit: caveat.limit, caveat: formatCaveat(caveat) };
  }
  return caps;
}

/** A grant whose signature checked out; its caveats are evaluated per request. */
export interface VerifiedGrant {
  /** The id of the grant the orchestrator minted; shared by every narrowed descendant. */
  id: string;
  /** The first `kind` caveat (the minted one). */
  kind: GrantKind;
  caveats: readonly Caveat[];
  /** Intersections of list caveats, for filtering listings; null = unrestricted. */
  types: string[] | null;
  models: string[] | null;
  albums: string[] | null;
  classes: string[] | null;
  /** Every rate caveat along the chain; a job must fit all of them. */
  rates: readonly GrantRate[];
  /** Its caps, counted against its whole lineage (every grant that shares its id). */
  caps: GrantCaps;
  /** Hosts its jobs may run on (the intersection of its `hosts` caveats); null = any. */
  hosts: string[] | null;
  /** The tightest priority ceiling, or null. */
  maxPriority: number | null;
  expiresAt: number | null;
}

function parseAll(lines: readonly string[]): Caveat[] {
  return lines.map((line) => {
    const caveat = parseCaveat(line);
    if (typeof caveat === 'string') throw new MeshError('GRANT_INVALID', { detail: caveat });
    return caveat;
  });
}

function intersect(caveats: readonly Caveat[], condition: 'types' | 'models' | 'albums' | 'classes' | 'hosts'): string[] | null {
  let result: string[] | null = null;
  for (const caveat of caveats) {
    if (caveat.condition !== condition) continue;
    result = result === null ? [...caveat.values] : result.filter((value) => caveat.values.includes(value));
  }
  return result;
}

/**
 * The limiter key of the rate caveat at `position`: the grant id and every
 * caveat line up to and including it. Macaroon caveats are only ever appended,
 * so this prefix is exactly "the grant as it was when the rate was added" —
 * shared by everything narrowed from it, different for a rate added later.
 */
function rateKey(id: string, lines: readonly string[], position: number): string {
  const hash = createHash('sha256').update(id);
  for (const line of lines.slice(0, position + 1)) hash.update('\n').update(line);
  return `${id}/${hash.digest('base64url').slice(0, 22)}`;
}

function summarize(id: string, lines: readonly string[], caveats: Caveat[]): VerifiedGrant {
  const kindCaveat = caveats.find((caveat) => caveat.condition === 'kind');
  if (!kindCaveat) throw new MeshError('GRANT_INVALID', { detail: 'the grant names no kind' });
  const problem = scopeProblem(caveats);
  if (problem) throw new MeshError('GRANT_INVALID', { detail: problem });
  const rates: GrantRate[] = [];
  let maxPriority: number | null = null;
  let expiresAt: number | null = null;
  for (const [position, caveat] of caveats.entries()) {
    if (caveat.condition === 'rate') {
      rates.push({ key: rateKey(id, lines, position), count: caveat.count, windowMs: caveat.windowMs, caveat: formatCaveat(caveat) });
    }
    if (caveat.condition === 'max-priority') maxPriority = Math.max(maxPriority ?? 0, caveat.level);
    if (caveat.condition === 'time-before') expiresAt = Math.min(expiresAt ?? Infinity, caveat.at);
  }
  return {
    id, kind: kindCaveat.value, caveats, rates, maxPriority, expiresAt, caps: capsOf(caveats),
    types: intersect(caveats, 'types'), models: intersect(caveats, 'models'),
    albums: intersect(caveats, 'albums'), classes: intersect(caveats, 'classes'), hosts: intersect(caveats, 'hosts'),
  };
}

/**
 * Mints and verifies grants with the orchestrator's root key. Signatures are
 * checked once per token and cached (HMAC chains in pure JS cost tens of µs);
 * caveats, expiry and revocation are checked on every request. Whoever holds
 * something open on a grant (an event stream, an agent link) can ask to be
 * told when it is revoked.
 */
export class GrantAuthority {
  readonly #rootKey: Uint8Array;
  readonly #location: string;
  readonly #revoked = new Set<string>();
  readonly #verified = new LRUCache<string, VerifiedGrant>({ max: 10_000 });
  readonly #mintedCaveats: readonly string[];
  readonly #watchers = new Map<string, Set<() => void>>();

  /**
   * `mintedCaveats` are appended to every grant minted here: a TLS mesh adds
   * `tls-ca sha256:<hex>`, so each grant tells its holder which CA to pin.
   */
  constructor(rootKey: Uint8Array, location: string, revokedIds: Iterable<string> = [], mintedCaveats: readonly string[] = []) {
    // Invariants: the root key comes from secret.key (made 32 bytes), and the routes refuse out-of-scope caveats before minting.
    if (rootKey.length < 32) throw new Error('the grant root key must be at least 32 bytes');
    parseAll(mintedCaveats);
    this.#rootKey = rootKey;
    this.#location = location;
    this.#mintedCaveats = [...mintedCaveats];
    for (const id of revokedIds) this.#revoked.add(id);
  }

  /** Mint a new grant of `kind` with these extra caveat lines; returns its id, token and every caveat it carries. */
  mint(kind: GrantKind, lines: readonly string[] = []): { id: string; token: string; caveats: string[] } {
    const problem = scopeProblem([{ condition: 'kind', value: kind }, ...parseAll(lines)]);
    // The routes that mint check first and answer 400; reaching this is a bug in the caller.
    if (problem) throw new Error(problem);
    const id = randomBytes(12).toString('base64url');
    const macaroon = newMacaroon({ identifier: GRANT_IDENTIFIER_PREFIX + id, location: this.#location, rootKey: this.#rootKey });
    const caveats = [`kind ${kind}`, ...lines, ...this.#mintedCaveats];
    for (const line of caveats) macaroon.addFirstPartyCaveat(line);
    return { id, token: encodeGrant(macaroon), caveats };
  }

  /** Refuse this grant and every narrowing of it from now on, and tell its watchers. */
  revoke(id: string): void {
    this.#revoked.add(id);
    const watchers = this.#watchers.get(id);
    this.#watchers.delete(id);
    for (const watcher of watchers ?? []) watcher();
  }

  isRevoked(id: string): boolean {
    return this.#revoked.has(id);
  }

  /** Call `onRevoked` once if grant `id` is revoked; returns the unsubscribe function. */
  whenRevoked(id: string, onRevoked: () => void): () => void {
    if (this.#revoked.has(id)) {
      queueMicrotask(onRevoked);
      return () => {};
    }
    let watchers = this.#watchers.get(id);
    if (!watchers) this.#watchers.set(id, (watchers = new Set()));
    watchers.add(onRevoked);
    return () => {
      watchers.delete(onRevoked);
      if (watchers.size === 0 && this.#watchers.get(id) === watchers) this.#watchers.delete(id);
    };
  }

  /** Check the signature and the grant's own validity (expiry, revocation). Throws 401s. */
  verify(token: string, now: number): VerifiedGrant {
    let grant = this.#verified.get(token);
    if (!grant) {
      const macaroon = decodeGrant(token);
      const id = grantIdOf(macaroon);
      const lines = caveatLines(macaroon);
      try {
        macaroon.verify(this.#rootKey, () => null);
      } catch (error) {
        throw new MeshError('GRANT_INVALID', { detail: 'bad signature (minted by another mesh, or tampered with)' }, { cause: error });
      }
      grant = summarize(id, lines, parseAll(lines));
      this.#verified.set(token, grant);
    }
    // The grant id travels in the error's params (not its message) for the audit log.
    if (this.#revoked.has(grant.id)) throw new MeshError('GRANT_REVOKED', { grantId: grant.id });
    if (grant.expiresAt !== null && now >= grant.expiresAt) {
      throw new MeshError('GRANT_EXPIRED', { expires: new Date(grant.expiresAt).toISOString(), grantId: grant.id });
    }
    return grant;
  }

  /** Throws GRANT_DENIED naming the first caveat that does not hold for this request. */
  authorize(grant: VerifiedGrant, request: GrantRequest, now: number): void {
    const failure = firstFailure(grant, request, now);
    if (failure) throw new MeshError('GRANT_DENIED', { ...failure, grantId: grant.id });
  }
}

/** The first caveat that does not hold, or null. */
export function firstFailure(grant: VerifiedGrant, request: GrantRequest, now: number): { caveat: string; detail: string } | null {
  for (const caveat of grant.caveats) {
    const detail = checkCaveat(caveat, request, now);
    if (detail) return { caveat: formatCaveat(caveat), detail };
  }
  return null;
}

/** Add caveats to a grant without the root key. The result can do at most what the original could. */
export function narrowGrant(token: string, lines: readonly string[]): string {
  if (lines.length === 0) throw new MeshError('GRANT_INVALID', { detail: 'narrowing needs at least one caveat' });
  const added = parseAll(lines);
  const macaroon = decodeGrant(token);
  grantIdOf(macaroon);
  // The orchestrator would refuse the result as invalid; say so now, where the caveat is being added.
  const problem = scopeProblem([...parseAll(caveatLines(macaroon)), ...added]);
  if (problem) throw new MeshError('GRANT_INVALID', { detail: problem });
  for (const line of lines) macaroon.addFirstPartyCaveat(line);
  return encodeGrant(macaroon);
}
