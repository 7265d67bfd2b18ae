import { randomBytes } from 'node:crypto';
import { existsSync, linkSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { MeshError } from '../protocol/index.js';

/**
 * A secret kept in a file of its own (mode 0600): read if it is there, else made and written. The file appears
 * whole or not at all — written under a temporary name and hard-linked into place, which fails if another process
 * got there first (then its secret wins) — so nobody reads a half-written secret, and a crash mid-write leaves no
 * empty file that the next start would take for the secret.
 */
export function secretFile(path: string, make: () => string): string {
  if (existsSync(path)) return readSecret(path);
  const value = make();
  const temporary = `${path}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  writeFileSync(temporary, `${value}\n`, { mode: 0o600, flag: 'wx' });
  try {
    linkSync(temporary, path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    return readSecret(path);
  } finally {
    rmSync(temporary, { force: true });
  }
  return value;
}

function readSecret(path: string): string {
  const value = readFileSync(path, 'utf8').trim();
  if (!value) throw new MeshError('SECRET_FILE_INVALID', { path, detail: 'it is empty; every grant signed with an old secret.key stops working when it is made anew' });
  return value;
}
