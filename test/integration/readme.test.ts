import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { removeDir, ROOT, tempDir, waitFor } from '../helpers/mesh.js';

const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');

/**
 * PATH as this machine has it, less some programs: each folder that holds one is replaced by a folder of links to
 * everything else in it. The tour then runs as on a machine without ffmpeg (issue 22: video after `npm install`
 * alone), though this one has it installed.
 */
function pathWithout(programs: readonly string[]): string {
  const shadow = tempDir('gpumesh-path-');
  return (process.env.PATH ?? '').split(':').map((dir, index) => {
    if (!programs.some((program) => existsSync(join(dir, program)))) return dir;
    const own = join(shadow, String(index));
    mkdirSync(own);
    for (const entry of readdirSync(dir)) if (!programs.includes(entry)) symlinkSync(join(dir, entry), join(own, entry));
    return own;
  }).join(':');
}
const blocks = [...readme.matchAll(/```sh\n([\s\S]*?)```/g)].map((match) => match[1]!);

describe('the README', () => {
  const data = tempDir();
  let stop: (() => Promise<void>) | null = null;
  afterAll(async () => {
    await stop?.();
  });

  it('starts with the two set-up commands', () => {
    const lines = blocks[0]!.split('\n').filter(Boolean);
    expect(lines[0]).toMatch(/^npm install && npm start\b/);
    expect(lines[1]).toMatch(/^npm install && npm run setup-tests && npm test\b/);
    const ci = readFileSync(join(ROOT, '.ci/run'), 'utf8');
    expect(ci).toContain('npm run setup-tests');
    expect(ci).toContain('npm test');
  });

  // Eight CLI processes and a mesh start: give it room on a loaded machine.
  it('runs its tour as written against `npm start` on a fresh data folder, on a machine without ffmpeg', { timeout: 180_000 }, async () => {
    // `npm start` exactly as the README says, on a free port instead of 7070 so it cannot clash; no ffmpeg or ffprobe
    // on PATH, so the clip is made with the ones `npm install` brought.
    const env = { ...process.env, GPUMESH_HOME: data, PATH: pathWithout(['ffmpeg', 'ffprobe']) };
    const up = spawn('npm', ['start', '--', '--port', '0'], {
      cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true,
    });
    let upOutput = '';
    up.stdout!.on('data', (chunk: Buffer) => (upOutput += chunk.toString()));
    up.stderr!.on('data', (chunk: Buffer) => (upOutput += chunk.toString()));
    stop = async () => {
      if (up.exitCode !== null) return;
      process.kill(-up.pid!, 'SIGTERM');
      await once(up, 'exit');
    };
    const gallery = await waitFor(() => /gallery\s+(\S+)/.exec(upOutput)?.[1], { timeoutMs: 60_000, what: 'npm start to print the gallery URL' });
    const url = new URL(gallery).origin;
    expect(upOutput).toContain(`admin    grant in ${join(data, 'admin.grant')}`);
    expect(existsSync(join(data, 'admin.grant'))).toBe(true);
    expect(readFileSync(join(data, 'admin.grant')).length).toBeGreaterThan(100);
    expect(statSync(join(data, 'admin.grant')).mode & 0o777).toBe(0o600);

    const tour = blocks[1]!.replaceAll('http://127.0.0.1:7070', url);
    const shell = spawn('bash', ['-euo', 'pipefail', '-c', tour], {
      cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    shell.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    shell.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const [code] = await once(shell, 'exit');
    expect(code, output).toBe(0);

    const saved = /file\s+(\S+\.png)/.exec(output)?.[1];
    const clip = /file\s+(\S+\.mp4)/.exec(output)?.[1];
    expect(clip && existsSync(clip)).toBe(true);
    expect(output).toMatch(/step 24\/24/);
    expect(output).toMatch(/url\s+http:\/\/127\.0\.0\.1:\d+\/v1\/blobs\/sha256:[0-9a-f]{64}/);
    expect(saved && existsSync(saved)).toBe(true);
    expect(output).toMatch(/HOST\s+CLASSES\s+DEVICE/);
    // `status` says which ffmpeg made the clip: the one shipped in the npm package.
    expect(output).toMatch(/ffmpeg: \S+ \(package; /);
    expect(output).toContain('cpu');
    expect(output).toMatch(/event: succeeded/);
    // The pipeline's stream: both steps, the clip (which waited for the picture) and the picture, succeeded.
    expect(output).toContain('"jobType":"video","prompt":"drifting"');
    expect(output.match(/event: succeeded\ndata: \{"type":"succeeded"/g)!.length).toBeGreaterThanOrEqual(3);
    expect(output).toContain('GRANT_DENIED');
    expect(output).toContain('types video');
    // The OpenAI client's two URLs, each with its read-only grant.
    expect(output.match(/\/v1\/blobs\/sha256:[0-9a-f]{64}\?access_token=/g)).toHaveLength(2);
    // AUTOMATIC1111's answer: its picture, and the seed asked for in `info` (a JSON string).
    expect(output).toContain('sdapi 1 picture, seed 7');
    expect(output).toMatch(/ocr@1/);
    // The sample page read back (the recogniser, trained mostly on Chinese, may drop the spaces between Latin words).
    expect(output.toLowerCase().replace(/[^a-z0-9]/g, '')).toContain('gpumeshreadsthispage');
    for (const [, file] of output.matchAll(/file\s+(\S+\.json)/g)) rmSync(file!, { force: true });
    for (const [, file] of output.matchAll(/file\s+(\S+\.png)/g)) rmSync(file!, { force: true });
    if (clip) for (const file of [clip, clip.replace(/\.mp4$/, '.poster.png')]) rmSync(file, { force: true });
    removeDir(data);
  });
});
