import { randomBytes } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import { bytesToBase64, importMacaroon, newMacaroon, type Macaroon } from 'macaroon';
import { MeshError } from '../../protocol/index.js';
import { checkCaveat, formatCaveat, parseCaveat, type Caveat, type GrantKind, type GrantRequest } from './caveats.js';

const IDENTIFIER_PREFIX = 'gpumesh/v1/';

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
  /** Hosts its jobs may run on (the intersection of its `hosts` caveats); null = any. */
  hosts: string[] | null;
  /** The tightest rate caveat in jobs per minute, or null. */
  ratePerMinute: number | null;
  /** The tightest priority ceiling, or null. */
  maxPriority: number | null;
  expiresAt: number | null;
  /** A key that differs between narrowed copies (their signatures differ): rate limits count per token. */
  tokenKey: string;
}

/**
 * Tokens are the macaroon's v2 JSON form, base64url-encoded. (The library's
 * binary encoder grows its buffer without bound as caveats are added, so we
 * do not use it.)
 */
function encode(macaroon: Macaroon): string {
  return Buffer.from(JSON.stringify(macaroon.exportJSON())).toString('base64url');
}

function decode(token: string): Macaroon {
  try {
    return importMacaroon(JSON.parse(Buffer.from(token, 'base64url').toString('utf8')) as object);
  } catch (error) {
    throw new MeshError('GRANT_INVALID', { detail: 'not a gpumesh grant (cannot decode it)' }, { cause: error });
  }
}

function identifierOf(macaroon: Macaroon): string {
  const identifier = new TextDecoder().decode(macaroon.identifier);
  if (!identifier.startsWith(IDENTIFIER_PREFIX)) throw new MeshError('GRANT_INVALID', { detail: 'not a gpumesh grant' });
  return identifier.slice(IDENTIFIER_PREFIX.length);
}

function caveatLines(macaroon: Macaroon): string[] {
  return macaroon.caveats.map((caveat) => {
    if (caveat.vid) throw new MeshError('GRANT_INVALID', { detail: 'third-party caveats are not supported' });
    return new TextDecoder().decode(caveat.identifier);
  });
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

function summarize(id: string, caveats: Caveat[], tokenKey: string): VerifiedGrant {
  const kindCaveat = caveats.find((caveat) => caveat.condition === 'kind');
  if (!kindCaveat) throw new MeshError('GRANT_INVALID', { detail: 'the grant names no kind' });
  let ratePerMinute: number | null = null;
  let maxPriority: number | null = null;
  let expiresAt: number | null = null;
  for (const caveat of caveats) {
    if (caveat.condition === 'rate') ratePerMinute = Math.min(ratePerMinute ?? Infinity, caveat.perMinute);
    if (caveat.condition === 'max-priority') maxPriority = Math.max(maxPriority ?? 0, caveat.level);
    if (caveat.condition === 'time-before') expiresAt = Math.min(expiresAt ?? Infinity, caveat.at);
  }
  return {
    id, kind: kindCaveat.value, caveats, tokenKey, ratePerMinute, maxPriority, expiresAt,
    types: intersect(caveats, 'types'), models: intersect(caveats, 'models'),
    albums: intersect(caveats, 'albums'), classes: intersect(caveats, 'classes'), hosts: intersect(caveats, 'hosts'),
  };
}

/**
 * Mints and verifies grants with the orchestrator's root key. Signatures are
 * checked once per token and cached (HMAC chains in pure JS cost tens of µs);
 * caveats, expiry and revocation are checked on every request.
 */
export class GrantAuthority {
  readonly #rootKey: Uint8Array;
  readonly #location: string;
  readonly #revoked = new Set<string>();
  readonly #verified = new LRUCache<string, VerifiedGrant>({ max: 10_000 });

  constructor(rootKey: Uint8Array, location: string, revokedIds: Iterable<string> = []) {
    if (rootKey.length < 32) throw new Error('the grant root key must be at least 32 bytes');
    this.#rootKey = rootKey;
    this.#location = location;
    for (const id of revokedIds) this.#revoked.add(id);
  }

  /** Mint a new grant of `kind` with these extra caveat lines; returns its id and token. */
  mint(kind: GrantKind, caveatLines: readonly string[] = []): { id: string; token: string } {
    parseAll(caveatLines);
    const id = randomBytes(12).toString('base64url');
    const macaroon = newMacaroon({ identifier: IDENTIFIER_PREFIX + id, location: this.#location, rootKey: this.#rootKey });
    macaroon.addFirstPartyCaveat(`kind ${kind}`);
    for (const line of caveatLines) macaroon.addFirstPartyCaveat(line);
    return { id, token: encode(macaroon) };
  }

  revoke(id: string): void {
    this.#revoked.add(id);
  }

  /** Check the signature and the grant's own validity (expiry, revocation). Throws 401s. */
  verify(token: string, now: number): VerifiedGrant {
    let grant = this.#verified.get(token);
    if (!grant) {
      const macaroon = decode(token);
      const id = identifierOf(macaroon);
      const lines = caveatLines(macaroon);
      try {
        macaroon.verify(this.#rootKey, () => null);
      } catch (error) {
        throw new MeshError('GRANT_INVALID', { detail: 'bad signature (minted by another mesh, or tampered with)' }, { cause: error });
      }
      grant = summarize(id, parseAll(lines), bytesToBase64(macaroon.signature));
      this.#verified.set(token, grant);
    }
    if (this.#revoked.has(grant.id)) throw new MeshError('GRANT_REVOKED');
    if (grant.expiresAt !== null && now >= grant.expiresAt) {
      throw new MeshError('GRANT_EXPIRED', { expires: new Date(grant.expiresAt).toISOString() });
    }
    return grant;
  }

  /** Throws GRANT_DENIED naming the first caveat that does not hold for this request. */
  authorize(grant: VerifiedGrant, request: GrantRequest, now: number): void {
    const failure = firstFailure(grant, request, now);
    if (failure) throw new MeshError('GRANT_DENIED', failure);
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
export function narrowGrant(token: string, caveatLines: readonly string[]): string {
  if (caveatLines.length === 0) throw new Error('narrowing needs at least one caveat');
  parseAll(caveatLines);
  const macaroon = decode(token);
  identifierOf(macaroon);
  for (const line of caveatLines) macaroon.addFirstPartyCaveat(line);
  return encode(macaroon);
}

/** Read a grant's id and caveats without verifying it (anyone can read a grant; only the orchestrator can verify it). */
export function inspectGrant(token: string): { id: string; location: string; caveats: string[] } {
  const macaroon = decode(token);
  return { id: identifierOf(macaroon), location: macaroon.location, caveats: caveatLines(macaroon) };
}
