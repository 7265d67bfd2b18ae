import { MeshError } from '../../protocol/index.js';
import { ServerTrust, parseFingerprint, pinsOfGrant, type Pin } from '../../tls-client/index.js';
import type { LinkTarget } from './link.js';

/**
 * The orchestrators an agent may link to, each trusted on its own (each serves the mesh's CA at its own URL),
 * pinning the CA its grant names (`tls-ca`) and the fingerprint it was given (`--tls-ca-fingerprint`).
 */
export function linkTargets(urls: string | readonly string[], grant: string, tlsCaFingerprint?: string): LinkTarget[] {
  const pins: Pin[] = pinsOfGrant(grant);
  if (tlsCaFingerprint) {
    const fingerprint = parseFingerprint(tlsCaFingerprint);
    if (!fingerprint) throw new MeshError('AGENT_OPTIONS_INVALID', { detail: `--tls-ca-fingerprint "${tlsCaFingerprint}" is not a SHA-256 fingerprint (sha256:<64 hex>, as \`gpumesh status\` on the orchestrator prints it)` });
    pins.push({ fingerprint, source: '--tls-ca-fingerprint' });
  }
  return (typeof urls === 'string' ? [urls] : urls).map((url) => ({ url, trust: new ServerTrust(url, pins) }));
}
