import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BIN, launchFlags, removeDir, ROOT, tempDir } from '../helpers/mesh.js';

/** The Node options of every documented way to start gpumesh: the command's own `exec node …` line is the reference. */
describe('how gpumesh starts Node', () => {
  const flags = launchFlags();

  it('the command runs Node with a capped young generation (shorter collection pauses)', () => {
    expect(flags).toEqual(['--max-semi-space-size=4']);
    // Run as a command, the way a person runs it (sh reads its first two lines and starts Node); a preloaded script reports Node's options.
    const dir = tempDir();
    try {
      writeFileSync(join(dir, 'report.cjs'), 'process.stderr.write(JSON.stringify(process.execArgv) + "\\n");');
      const run = spawnSync(BIN, ['--version'], { encoding: 'utf8', env: { ...process.env, NODE_OPTIONS: `--require ${join(dir, 'report.cjs')}` } });
      expect(run.status).toBe(0);
      expect(run.stdout.trim()).toMatch(/^\d+\.\d+\.\d+/);
      expect(JSON.parse(run.stderr.trim().split('\n')[0]!)).toEqual(flags);
    } finally {
      removeDir(dir);
    }
  });

  it('npm start and the systemd units in docs/operations.md pass the same options', () => {
    const start = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts.start!;
    expect(start).toBe(`node ${flags.join(' ')} bin/gpumesh.js up`);
    const units = readFileSync(join(ROOT, 'docs/operations.md'), 'utf8').match(/ExecStart=\/usr\/bin\/node .*/g)!;
    expect(units.length).toBeGreaterThanOrEqual(3);
    for (const line of units) expect(line).toContain(`/usr/bin/node ${flags.join(' ')} /`);
  });
});
