import { MeshError } from '../../../protocol/index.js';

/**
 * Page cursors of the listings (jobs, artifacts, the audit log): the row sequence number to continue before,
 * opaque to clients. One codec for every listing kept by sequence number.
 */
export function encodeCursor(seq: number): string {
  return Buffer.from(`s${seq}`).toString('base64url');
}

/** The sequence number a cursor this server gave out names; BAD_REQUEST for any other text. */
export function decodeCursor(cursor: string): number {
  const text = Buffer.from(cursor, 'base64url').toString();
  const seq = /^s(\d+)$/.exec(text)?.[1];
  if (!seq) throw new MeshError('BAD_REQUEST', { detail: `cursor "${cursor.slice(0, 50)}" is not one this server gave out` });
  return Number(seq);
}
