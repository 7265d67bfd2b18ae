import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { LISTEN_FILE, listenerRuns, readListenFile } from '../../protocol/listen-file.js';
import { certificateFingerprint, parseFingerprint, pinsOfGrant, type Pin } from '../../tls-client/index.js';
import { MeshClient } from './client.js';
import { dataDir } from './data-folder.js';
import { CliError } from './output.js';
import { parseUrlList } from './url-list.js';


export interface ClientOptions {
  /** One orchestrator URL, or several comma-separated (`--url`). */
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


/** The URLs a command talks to and where they came from (said when no orchestrator can be reached). */
export interface ResolvedUrl {
  /**
   * One orchestrator, or several sharing one store (`--url a,b`): a request goes to the next when one cannot be
   * reached or answers NOT_LEADER (see MeshClient).
   */
  urls: string[];
  source: string;
}

/**
 * The orchestrator's URLs: --url, then $GPUMESH_URL (each one URL or several, comma-separated), then where the mesh
 * using the data folder (dataDir: --data, else $GPUMESH_HOME, else ./.gpumesh where it exists, else the platform's folder) listens — <data>/listen.json, written by `up`
 * and `serve`, while its process runs — then http://127.0.0.1:7070. `flag` names the option for error messages
 * (`--join` for the agent).
 */
export function resolveUrlWithSource(options: ClientOptions, flag = '--url'): ResolvedUrl {
  if (options.url) return { urls: parseUrlList(options.url, flag), source: flag };
  if (process.env.GPUMESH_URL) return { urls: parseUrlList(process.env.GPUMESH_URL, 'GPUMESH_URL'), source: 'GPUMESH_URL' };
  const data = dataDir(options.data);
  const folder = options.data ? `--data ${data}` : process.env.GPUMESH_HOME ? `GPUMESH_HOME=${data}` : `the default data folder ${data}`;
  const file = join(data, LISTEN_FILE);
  const record = readListenFile(data);
  if (record && listenerRuns(record)) return { urls: [record.url], source: `${file}, where the mesh of ${folder} (pid ${record.pid}) listens` };
  const stale = record ? `the mesh recorded in ${file} (pid ${record.pid}) is not running` : `no mesh recorded in ${file}`;
  // A mesh started before listen.json existed wrote only this.
  const legacy = join(data, 'orchestrator.url');
  if (!record && existsSync(legacy)) return { urls: [readFileSync(legacy, 'utf8').trim()], source: legacy };
  return { urls: ['http://127.0.0.1:7070'], source: `the default: ${stale}` };
}

export function resolveUrls(options: ClientOptions, flag?: string): string[] {
  return resolveUrlWithSource(options, flag).urls;
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
export function resolvePins(options: ClientOptions, url: string | readonly string[], grant: string | null): Pin[] {
  const explicit = explicitPin(options);
  if (explicit) return [explicit];
  const https = (typeof url === 'string' ? [url] : url).some((one) => one.startsWith('https:'));
  if (!https || pinsOfGrant(grant).length > 0) return [];
  const local = join(dataDir(options.data), 'tls', 'ca.crt');
  return existsSync(local) ? [{ fingerprint: certificateFingerprint(readFileSync(local, 'utf8')), source: local }] : [];
}

export function clientFrom(options: ClientOptions): MeshClient {
  const { urls, source } = resolveUrlWithSource(options);
  const grant = resolveGrant(options);
  return new MeshClient(urls, grant, { pins: resolvePins(options, urls, grant), urlSource: source });
}
