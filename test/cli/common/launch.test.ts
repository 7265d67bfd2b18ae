import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BIN, launchFlags, removeDir, ROOT, tempDir } from '../../helpers/mesh.js';

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
