import { statSync, writeFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { secretFile } from '../../src/orchestrator/secret-file.js';
import { removeDir, tempDir } from '../helpers/mesh.js';

describe('secret files (secret.key, admin.grant)', () => {
  it('makes the secret once, owner-only, appearing whole (no temporary file left), and reads it back after', () => {
    const dir = tempDir('gpumesh-secret-');
    const path = join(dir, 'secret.key');
    let made = 0;
    const make = (): string => `secret-${++made}`;
    expect(secretFile(path, make)).toBe('secret-1');
    expect(secretFile(path, make)).toBe('secret-1');
    expect(made).toBe(1);
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(readdirSync(dir)).toEqual(['secret.key']);
    removeDir(dir);
  });

  it('refuses an empty one (a crash mid-write, before files appeared whole) instead of taking it for the secret', () => {
    // Found next to the netns work: a test read admin.grant between its creation and its write and sent no grant.
    const dir = tempDir('gpumesh-secret-');
    const path = join(dir, 'admin.grant');
    writeFileSync(path, '\n');
    expect(() => secretFile(path, () => 'fresh')).toThrow(/admin\.grant is not usable \(it is empty; .*\); delete it to have a new one made/);
    removeDir(dir);
  });
});
