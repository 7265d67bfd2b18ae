import { spawn, spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BIN, launchFlags, removeDir, ROOT, tempDir, waitFor } from '../../helpers/mesh.js';

/** The Node options of every documented way to start gpumesh: the command's own `NODE_FLAGS` line is the reference. */
describe('how gpumesh starts Node', () => {
  const flags = launchFlags();

  /**
   * Run the command with the Node that runs these tests (Node 20, or 22 under `npm run test:node22`, whose checkout's
   * native modules are built for it); every Node process it runs reports its options.
   */
  function reportedOptions(args: string[]): { status: number | null; stdout: string; reports: string[][]; pids: number[] } {
    const dir = tempDir();
    try {
      writeFileSync(join(dir, 'report.cjs'), 'process.stderr.write("options " + JSON.stringify([process.pid, process.execArgv]) + "\\n");');
      const run = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', env: { ...process.env, NODE_OPTIONS: `--require ${join(dir, 'report.cjs')}` } });
      const lines = run.stderr.split('\n').filter((line) => line.startsWith('options ')).map((line) => JSON.parse(line.slice('options '.length)) as [number, string[]]);
      return { status: run.status, stdout: run.stdout, reports: lines.map(([, options]) => options), pids: lines.map(([pid]) => pid) };
    } finally {
      removeDir(dir);
    }
  }

  it('a long-running command (up, serve, agent) becomes Node again in place with a capped young generation where Node can; never a second process', () => {
    expect(flags).toEqual(['--max-semi-space-size=32', '--no-allocation-site-pretenuring']);
    const serve = reportedOptions(['serve', '--help']);
    expect(serve.status).toBe(0);
    expect(serve.stdout).toContain('Usage: gpumesh serve');
    if (typeof (process as { execve?: unknown }).execve === 'function') {
      // Node 22.15+ on POSIX: the command as started, then the same process (its pid) with the options.
      expect(serve.reports).toEqual([[], flags]);
      expect(new Set(serve.pids).size).toBe(1);
    } else {
      // Node 20: it runs as started (a child would be a second process a service manager could end alone).
      expect(serve.reports).toEqual([[]]);
    }
  });

  it('a short command runs at once, without starting Node again', () => {
    const version = reportedOptions(['--version']);
    expect(version.status).toBe(0);
    expect(version.stdout.trim()).toMatch(/^\d+\.\d+\.\d+/);
    expect(version.reports).toEqual([[]]);
  });

  it('SIGTERM to the command stops serve, and nothing is left running', async () => {
    const dir = tempDir();
    try {
      const serve = spawn(process.execPath, [BIN, 'serve', '--data', dir, '--port', '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
      let output = '';
      serve.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
      // Logged in the turn that installs its signal handlers.
      await waitFor(() => output.includes('orchestrator listening'), { timeoutMs: 30_000, what: 'serve to listen' });
      const exit = new Promise<number | null>((resolve) => serve.once('exit', (code) => resolve(code)));
      serve.kill('SIGTERM');
      expect(await exit).toBe(0);
      const left = readdirSync('/proc').filter((name) => /^\d+$/.test(name)).filter((pid) => {
        try {
          return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(dir);
        } catch {
          return false;
        }
      });
      expect(left).toEqual([]);
    } finally {
      removeDir(dir);
    }
  });

  it('the command needs no POSIX shell: its first line starts Node (npm\'s shims on Windows read it)', () => {
    expect(readFileSync(BIN, 'utf8').split('\n')[0]).toBe('#!/usr/bin/env node');
  });

  it('npm start and the systemd units in the docs pass the same options (a unit that runs the gpumesh command gets them from it)', () => {
    const start = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts.start!;
    expect(start).toBe(`node ${flags.join(' ')} bin/gpumesh.js up`);
    const docs = [join(ROOT, 'docs/operations.md'), ...readdirSync(join(ROOT, 'docs/systemd')).map((name) => join(ROOT, 'docs/systemd', name))];
    const units = docs.flatMap((file) => readFileSync(file, 'utf8').match(/ExecStart=\S+.*/g) ?? []);
    expect(units.filter((line) => line.startsWith('ExecStart=/usr/bin/node ')).length).toBeGreaterThanOrEqual(2);
    for (const line of units) {
      if (line.startsWith('ExecStart=/usr/bin/node ')) expect(line).toContain(`/usr/bin/node ${flags.join(' ')} /`);
      else expect(line).toMatch(/^ExecStart=\/usr\/(local\/)?bin\/gpumesh /);
    }
  });
});
