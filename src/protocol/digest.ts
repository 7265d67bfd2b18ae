import { createHash } from 'node:crypto';
import { MeshError } from './errors.js';

/** Content addresses: `sha256:<64 lowercase hex>`, the one way blobs, models and outputs are named on both sides. */
export const DIGEST_PATTERN = /^sha256:[0-9a-f]{64}$/;

export function sha256Digest(bytes: Uint8Array): string {
  return `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
}

/** The value, if it is a digest; else BAD_DIGEST (400) naming it. */
export function assertDigest(value: string): string {
  if (!DIGEST_PATTERN.test(value)) throw new MeshError('BAD_DIGEST', { digest: value.slice(0, 100) });
  return value;
}
