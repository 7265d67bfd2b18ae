import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { Agent } from '../../../src/agent/index.js';
import { Governor, systemClock } from '../../../src/agent/governance/index.js';
import { tempDir } from '../../helpers/mesh.js';
import { capturingLog, expectNothingLeft } from './helpers.js';

const WARN = 40;

describe('governance at start: what the host allows, said once', () => {
  it('no cgroup filesystem: one warning naming why, then process groups only', async () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'mountinfo'), '22 1 0:21 / /proc rw - proc proc rw\n');
    writeFileSync(join(dir, 'cgroup'), '0::/\n');
    const { log, lines } = capturingLog();
    const governor = await Governor.create({ agentId: 'no-cgroups', log, files: { mountinfo: join(dir, 'mountinfo'), cgroup: join(dir, 'cgroup') } });
    expect(governor.cgroupVersion).toBeNull();
    const said = lines.filter((line) => /process governance/.test(line.msg));
    expect(said).toHaveLength(1);
    expect(said[0]).toMatchObject({ level: WARN, msg: expect.stringMatching(/without cgroups: no cgroup filesystem is mounted .*process groups/) });

    const governed = governor.spawn({ name: 'sleeper', file: '/bin/sleep', args: ['30'], env: process.env, limits: { memoryLimitMB: 10, pidsLimit: 5, cpuWeight: 100 }, stdio: ['ignore', 'ignore', 'ignore'] });
    expect(governed.container).toBeNull();
    expect((await governed.stop(1000, systemClock)).signal).toBe('SIGTERM');
    await expectNothingLeft(governed.pid, []);
    expect(lines.filter((line) => /process governance/.test(line.msg))).toHaveLength(1);
    await governor.close();
  });

  it('cgroups off in the config: says so', async () => {
    const { log, lines } = capturingLog();
    const governor = await Governor.create({ agentId: 'off', log, config: { cgroups: 'off' } });
    expect(governor.cgroupsUnavailable).toMatch(/off in the config/);
    expect(lines.filter((line) => line.level === WARN && /off in the config/.test(line.msg))).toHaveLength(1);
  });

  it.skipIf(process.getuid?.() !== 0)(`not root: the warning names the permission it lacked${process.getuid?.() !== 0 ? ' (skipped: the test needs root to start a process as another user)' : ''}`, async () => {
    // The compiled module when there is one (fast); else the sources through tsx (a cold start for a new user: seconds).
    const compiled = new URL('../../../dist/agent/governance/index.js', import.meta.url);
    const args = existsSync(compiled)
      ? ['--input-type=module', '-e', `import { pino } from 'pino'; import { Governor } from '${compiled.href}'; await (await Governor.create({ agentId: 'as-another-user', log: pino() })).close();`]
      : ['--import', 'tsx', fileURLToPath(new URL('./fixtures/governor-start.mts', import.meta.url))];
    const child = spawn(process.execPath, args, { uid: 65534, gid: 65534, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, HOME: '/tmp' } });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    expect((await once(child, 'exit'))[0]).toBe(0);
    const said = output.split('\n').filter((line) => line.includes('process governance'));
    expect(said).toHaveLength(1);
    const line = JSON.parse(said[0]!) as { level: number; msg: string };
    // A host whose v2 tree is delegated to that user would allow it; then there is nothing to warn about.
    if (line.level === WARN) expect(line.msg).toMatch(/EACCES|EPERM|EROFS/);
    if (line.level === WARN) expect(line.msg).toMatch(/not root/);
  });

  it('the agent says once, at start, how its engine processes are governed', async () => {
    const { log, lines } = capturingLog();
    const agent = await Agent.create({ url: 'http://127.0.0.1:1', grant: 'unused', host: 'governed-agent', classes: ['image'], dataDir: tempDir(), nvidiaSmi: '/nonexistent/nvidia-smi', log });
    await agent.close();
    expect(lines.filter((line) => /^process governance/.test(line.msg))).toHaveLength(1);
  });
});
