import { importMacaroon, type Macaroon } from 'macaroon';
import { MeshError } from './errors.js';

/**
 * A grant as it travels: a macaroon in its v2 JSON form, base64url-encoded. Anyone can read one (its id and caveat
 * lines) and add caveats; only the orchestrator that minted it can verify it (orchestrator/auth/grants.ts). Clients
 * read grants too — to learn which TLS CA to pin, or which host an agent grant is for — so reading lives here, on
 * the ground both sides share.
 */
export const GRANT_IDENTIFIER_PREFIX = 'gpumesh/v1/';

/**
 * The token of a macaroon. (The library's binary encoder grows its buffer without bound as caveats are added, so
 * the JSON form is used.)
 */
export function encodeGrant(macaroon: Macaroon): string {
  return Buffer.from(JSON.stringify(macaroon.exportJSON())).toString('base64url');
}

export function decodeGrant(token: string): Macaroon {
  try {
    return importMacaroon(JSON.parse(Buffer.from(token, 'base64url').toString('utf8')) as object);
  } catch (error) {
    throw new MeshError('GRANT_INVALID', { detail: 'not a gpumesh grant (cannot decode it)' }, { cause: error });
  }
}

/** The grant's id: its identifier without the prefix; GRANT_INVALID when it is not a gpumesh grant. */
export function grantIdOf(macaroon: Macaroon): string {
  const identifier = new TextDecoder().decode(macaroon.identifier);
  if (!identifier.startsWith(GRANT_IDENTIFIER_PREFIX)) throw new MeshError('GRANT_INVALID', { detail: 'not a gpumesh grant' });
  return identifier.slice(GRANT_IDENTIFIER_PREFIX.length);
}

/** Its first-party caveats, as written; a third-party caveat makes it invalid. */
export function caveatLines(macaroon: Macaroon): string[] {
  return macaroon.caveats.map((caveat) => {
    if (caveat.vid) throw new MeshError('GRANT_INVALID', { detail: 'third-party caveats are not supported' });
    return new TextDecoder().decode(caveat.identifier);
  });
}

/** Read a grant's id and caveats without verifying it (anyone can read a grant; only the orchestrator can verify it). */
export function inspectGrant(token: string): { id: string; location: string; caveats: string[] } {
  const macaroon = decodeGrant(token);
  return { id: grantIdOf(macaroon), location: macaroon.location, caveats: caveatLines(macaroon) };
}
