import { execFile } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import sharp from 'sharp';
import { removeDir, ROOT, startMesh, tempDir, type RunningMesh } from '../helpers/mesh.js';

/**
 * Every `sh` example of docs/api.md, run as written by bash against a real `gpumesh up` (its URL for
 * 127.0.0.1:7070, the admin grant as $GRANT, a photo.png in the folder it runs in): an example that no longer works
 * fails here, not in a reader's terminal. curl fails on an HTTP error, so a 4xx answer fails the example.
 */
const run = promisify(execFile);
const page = readFileSync(join(ROOT, 'docs/api.md'), 'utf8');
const examples = [...page.matchAll(/```sh\n([\s\S]*?)```/g)].map((match) => match[1]!);

let mesh: RunningMesh;
const dir = tempDir('gpumesh-api-docs-');

beforeAll(async () => {
  mesh = await startMesh();
  const svg = '<svg xmlns="http://www.w3.org/2000/svg" width="96" height="64"><rect width="96" height="64" fill="#3060c0"/><circle cx="48" cy="32" r="18" fill="#e0d0a0"/></svg>';
  writeFileSync(join(dir, 'photo.png'), await sharp(Buffer.from(svg)).png().toBuffer());
});
afterAll(async () => {
  await mesh?.stop();
  if (mesh) removeDir(mesh.data);
  removeDir(dir);
});

describe('docs/api.md', () => {
  it('has examples to run', () => {
    expect(examples.length).toBeGreaterThanOrEqual(5);
  });

  it.each(examples.map((example, index) => [index + 1, example] as const))('example %i runs as written', async (_index, example) => {
    const script = `set -euo pipefail\n${example.replaceAll('http://127.0.0.1:7070', mesh.url).replaceAll('curl -s ', 'curl -s --fail-with-body ')}`;
    const { stdout } = await run('bash', ['-c', script], { cwd: dir, env: { ...process.env, GRANT: mesh.admin }, timeout: 60_000 });
    expect(stdout.trim().length).toBeGreaterThan(0);
    expect(stdout).not.toMatch(/"error":\s*[{"]/);
  });
});
