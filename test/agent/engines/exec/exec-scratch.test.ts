import { spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { cpuDevice } from '../../../../src/agent/devices.js';
import { ExecEngine } from '../../../../src/agent/engines/exec/index.js';
import type { ModelManifest } from '../../../../src/protocol/index.js';
import { ROOT, tempDir, waitFor } from '../../../helpers/mesh.js';
import { identityTag, ownIdentity, startedAt } from '../../../../src/agent/governance/process-identity.js';

// An exec job killed mid-run leaves no gpumesh-exec-* folder behind: cancelled, stopped by the agent's shutdown, or
// orphaned by an agent that was killed outright (the next agent to start sweeps it).
const HANG = join(ROOT, 'test/fixtures/commands/hang.sh');

function manifest(settings: Record<string, unknown>, name = 'hang'): ModelManifest {
  return { name, version: '1', engine: 'exec', digest: `sha256:${'2'.repeat(64)}`, bytes: 0, memoryMB: 16, jobTypes: ['image'], params: {}, settings };
}

const scratchDirs = (root: string): string[] => readdirSync(root).filter((entry) => entry.startsWith('gpumesh-exec-'));

async function hangingRun(engine: ExecEngine, root: string) {
  const pidFile = join(tempDir(), 'pids');
  const loaded = await engine.load(manifest({ command: ['sh', HANG, pidFile], killGraceMs: 300 }), HANG, cpuDevice(512));
  let progressed = false;
  const run = loaded.run([{ id: 'h', input: {} }], () => (progressed = true));
  await waitFor(() => progressed, { what: 'the command to start' });
  expect(scratchDirs(root)).toEqual([expect.stringMatching(new RegExp(`^gpumesh-exec-${identityTag(ownIdentity()).replace('.', '\\.')}-`))]);
  return { run, loaded, pids: readFileSync(pidFile, 'utf8').trim().split(' ').map(Number) };
}

describe('exec scratch directories', () => {
  it('a job cancelled mid-run leaves nothing in the scratch root', async () => {
    const root = tempDir();
    const engine = new ExecEngine({ scratchRoot: root });
    const { run, loaded } = await hangingRun(engine, root);
    loaded.cancel(['h']);
    expect((await run).outputs).toMatchObject([{ ok: false, code: 'CANCELLED' }]);
    expect(scratchDirs(root)).toEqual([]);
  }, 30_000);

  it('the agent shutting down mid-run (engine.close) waits for the run to end and its folder to go', async () => {
    const root = tempDir();
    const engine = new ExecEngine({ scratchRoot: root });
    const { run } = await hangingRun(engine, root);
    await engine.close();
    expect(scratchDirs(root)).toEqual([]);
    expect((await run).outputs).toMatchObject([{ ok: false, code: 'CANCELLED' }]);
  }, 30_000);

  it('the folders of an agent killed outright are removed by the next engine; a running agent\'s, and one whose pid a new process holds, are kept apart', async () => {
    const root = tempDir();
    const dead = spawnSync('true').pid!;
    const running = identityTag({ pid: process.ppid, started: startedAt(process.ppid)! });
    // This very pid, started at another moment: the agent that made it is gone, whatever holds its pid now.
    const recycled = identityTag({ pid: process.ppid, started: 'another moment' });
    mkdirSync(join(root, `gpumesh-exec-${dead}.1x-abc123`, 'out'), { recursive: true });
    mkdirSync(join(root, `gpumesh-exec-${running}-def456`));
    mkdirSync(join(root, `gpumesh-exec-${recycled}-ghi789`));
    mkdirSync(join(root, 'gpumesh-exec-older'));
    await new ExecEngine({ scratchRoot: root }).load(manifest({ command: ['true'] }, 'noop'), null, cpuDevice(512));
    expect(scratchDirs(root).sort()).toEqual([`gpumesh-exec-${running}-def456`, 'gpumesh-exec-older'].sort());
  });

  it('a model whose settings have no command says which field is missing and what to put there', async () => {
    await expect(new ExecEngine({ scratchRoot: tempDir() }).load(manifest({}, 'nocommand'), null, cpuDevice(512))).rejects.toMatchObject({
      code: 'ENGINE_FAILED',
      message: expect.stringContaining('model "nocommand" (exec): invalid settings: settings.command: missing: the command to run for each batch or job, e.g. command: python3 paint.py --out ${OUTPUT_DIR}'),
    });
  });
});
