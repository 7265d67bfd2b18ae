import { hostname } from 'node:os';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { TLS_CA_CAVEAT } from '../../tls-client/fingerprint.js';
import type { MeshConfig } from '../config/config.js';
import type { TlsMaterial } from './material.js';
import { certificateNamesFor } from '../config/certificate-names.js';

// Issuing (certificates.ts, material.ts) loads @peculiar/x509, which takes a while to import: it is
// loaded only when TLS is on. Import those files directly to use them.
export type { TlsMaterial, TlsSetup, TlsPolicy } from './material.js';
export type { KeyAndCertificate } from './certificates.js';

/**
 * The orchestrator's TLS at start: null when `server.tls.enabled` is off; else the material under
 * `<data>/tls`, made or renewed as needed (and logged, with the fingerprint clients pin).
 */
export async function loadServerTls(config: MeshConfig, now: number, log: Logger, machineHostname = hostname()): Promise<TlsMaterial | null> {
  if (!config.server.tls.enabled) return null;
  const names = certificateNamesFor(config.server, machineHostname);
  const { ensureTlsMaterial } = await import('./material.js');
  const setup = await ensureTlsMaterial(join(config.data, 'tls'), names, now);
  if (setup.createdCa) log.info({ caFingerprint: setup.material.caFingerprint }, 'created the mesh\'s private TLS CA');
  if (setup.issued) log.info({ reason: setup.issued, names: setup.material.names.map((name) => name.value) }, 'issued the server certificate');
  return setup.material;
}

/** The caveat every grant of a TLS mesh carries, so its holder knows which CA to pin. */
export function tlsCaCaveat(material: TlsMaterial): string {
  return `${TLS_CA_CAVEAT} ${material.caFingerprint}`;
}
