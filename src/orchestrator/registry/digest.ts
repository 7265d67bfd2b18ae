import { createHash } from 'node:crypto';
import { MeshError } from '../../protocol/index.js';

const DIGEST = /^sha256:[0-9a-f]{64}$/;

export const isDigest = (value: string): boolean => DIGEST.test(value);

export function assertDigest(value: string): string {
  if (!DIGEST.test(value)) throw new MeshError('BAD_DIGEST', { digest: value.slice(0, 100) });
  return value;
}

export function sha256Digest(bytes: Uint8Array): string {
  return `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
}
