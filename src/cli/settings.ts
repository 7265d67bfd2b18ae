import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { MeshClient } from './client.js';

/** Where the mesh keeps its data: --data, then $GPUMESH_HOME, then ./.gpumesh. */
export function dataDir(option?: string): string {
  return resolve(option ?? process.env.GPUMESH_HOME ?? '.gpumesh');
}

export interface ClientOptions {
  url?: string;
  grant?: string;
  grantFile?: string;
  data?: string;
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

export function clientFrom(options: ClientOptions): MeshClient {
  return new MeshClient(resolveUrl(options), resolveGrant(options));
}
