import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { certificateFingerprint, parseFingerprint, pinsOfGrant, type Pin } from '../../tls/index.js';
import { MeshClient } from './client.js';
import { CliError } from './output.js';

/** Where the mesh keeps its data: --data, then $GPUMESH_HOME, then ./.gpumesh. */
export function dataDir(option?: string): string {
  return resolve(option ?? process.env.GPUMESH_HOME ?? '.gpumesh');
}

export interface ClientOptions {
  url?: string;
  grant?: string;
  grantFile?: string;
  data?: string;
  /** A CA fingerprint to pin (`--tls-ca-fingerprint`), for a grant that names none. */
  tlsCaFingerprint?: string;
}

/**
 * The grant a command uses: --grant, then --grant-file, then $GPUMESH_GRANT,
 * then the admin grant of a local mesh (<data>/admin.grant).
 */
export function resolveGrant(options: ClientOptions): string | null {
  if (options.grant) return options.grant.trim();
  if (options.grantFile) return readFileSync(options.grantFile, 'utf8').trim();
  if (process.env.GPUMESH_GRANT) return process.env.GPUMESH_GRANT.trim();
  const local = join(dataDir(options.data), 'admin.grant');
  return existsSync(local) ? readFileSync(local, 'utf8').trim() : null;
}

/**
 * The orchestrator's URL: --url, then $GPUMESH_URL, then the URL a local mesh
 * wrote to <data>/orchestrator.url when it started, then http://127.0.0.1:7070.
 */
export function resolveUrl(options: ClientOptions): string {
  if (options.url) return options.url;
  if (process.env.GPUMESH_URL) return process.env.GPUMESH_URL;
  const local = join(dataDir(options.data), 'orchestrator.url');
  return existsSync(local) ? readFileSync(local, 'utf8').trim() : 'http://127.0.0.1:7070';
}

/** A fingerprint from --tls-ca-fingerprint, then $GPUMESH_TLS_CA_FINGERPRINT; a malformed one stops the command. */
export function explicitPin(options: { tlsCaFingerprint?: string }): Pin | null {
  const text = options.tlsCaFingerprint ?? process.env.GPUMESH_TLS_CA_FINGERPRINT;
  if (!text) return null;
  const fingerprint = parseFingerprint(text);
  if (!fingerprint) throw new CliError(`--tls-ca-fingerprint: "${text}" is not a SHA-256 fingerprint (sha256:<64 hex>, or openssl's AB:CD:… form)`);
  return { fingerprint, source: options.tlsCaFingerprint ? '--tls-ca-fingerprint' : 'GPUMESH_TLS_CA_FINGERPRINT' };
}

/**
 * What the CLI pins besides the grant's `tls-ca` caveats: --tls-ca-fingerprint (or its env var);
 * else, for an https URL and a grant that names no CA (an admin.grant minted before TLS was on),
 * the CA of the local mesh in <data>/tls/ca.crt — the data folder is this machine's own.
 */
export function resolvePins(options: ClientOptions, url: string, grant: string | null): Pin[] {
  const explicit = explicitPin(options);
  if (explicit) return [explicit];
  if (!url.startsWith('https:') || pinsOfGrant(grant).length > 0) return [];
  const local = join(dataDir(options.data), 'tls', 'ca.crt');
  return existsSync(local) ? [{ fingerprint: certificateFingerprint(readFileSync(local, 'utf8')), source: local }] : [];
}

export function clientFrom(options: ClientOptions): MeshClient {
  const url = resolveUrl(options);
  const grant = resolveGrant(options);
  return new MeshClient(url, grant, { pins: resolvePins(options, url, grant) });
}
