import { execFile } from 'node:child_process';
import { chmodSync, copyFileSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import sharp from 'sharp';
import { removeDir, ROOT, startMesh, tempDir, type RunningMesh } from '../helpers/mesh.js';

/**
 * Every `sh` example of docs/api.md, run as written by bash against a real `gpumesh up` (its URL for
 * 127.0.0.1:7070, the admin grant as $GRANT, a photo.png and the sample page.png in the folder it runs in, with the
 * checkout's node_modules and a `gpumesh` command): an example that no longer works
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
  // The OCR example: a page of text, the package's model files where a checkout has them, and the `gpumesh` command.
  copyFileSync(join(ROOT, 'docs/samples/page.png'), join(dir, 'page.png'));
  symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'));
  mkdirSync(join(dir, 'bin'));
  writeFileSync(join(dir, 'bin', 'gpumesh'), `#!/bin/sh\nexec "${process.execPath}" "${join(ROOT, 'bin/gpumesh.js')}" "$@"\n`);
  chmodSync(join(dir, 'bin', 'gpumesh'), 0o755);
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
    const env = { ...process.env, GRANT: mesh.admin, GPUMESH_HOME: mesh.data, PATH: `${join(dir, 'bin')}:${process.env.PATH}` };
    const { stdout } = await run('bash', ['-c', script], { cwd: dir, env, timeout: 60_000 });
    expect(stdout.trim().length).toBeGreaterThan(0);
    expect(stdout).not.toMatch(/"error":\s*[{"]/);
    // The OCR example reads the sample page back (the recogniser may drop the spaces between Latin words).
    if (example.includes('"type\\":\\"ocr')) expect(stdout.toLowerCase().replace(/[^a-z0-9]/g, '')).toContain('gpumeshreadsthispage');
  });
});
