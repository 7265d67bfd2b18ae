import { createHash, X509Certificate } from 'node:crypto';

/**
 * The words both ends of a TLS mesh share: where the CA certificate is served,
 * and how its fingerprint is written (in grants, flags and logs).
 */

/** Served without a grant: a client fetches the CA here and pins it only if its fingerprint matches. */
export const TLS_CA_PATH = '/v1/tls/ca.crt';

/** The caveat condition that names the CA a client must pin (`tls-ca sha256:<hex>`). */
export const TLS_CA_CAVEAT = 'tls-ca';

const CANONICAL = /^sha256:[0-9a-f]{64}$/;

/** `sha256:<64 lowercase hex>` of a certificate's DER bytes (the same bytes `openssl x509 -fingerprint -sha256` hashes). */
export function certificateFingerprint(pem: string): string {
  return `sha256:${createHash('sha256').update(new X509Certificate(pem).raw).digest('hex')}`;
}

export function isFingerprint(text: string): boolean {
  return CANONICAL.test(text);
}

/**
 * Read a fingerprint the way people paste it: `sha256:ab12…`, openssl's
 * `AB:12:…` (with or without `sha256 Fingerprint=`), or bare hex.
 * Returns the canonical `sha256:<hex>`, or null if it is not a SHA-256 fingerprint.
 */
export function parseFingerprint(text: string): string | null {
  const hex = text.trim().replace(/^sha256(\s+fingerprint)?[:=]\s*/i, '').replace(/:/g, '').toLowerCase();
  return /^[0-9a-f]{64}$/.test(hex) ? `sha256:${hex}` : null;
}
