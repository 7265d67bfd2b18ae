import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { ProcessCgroup } from '../../../../src/agent/governance/cgroups/driver.js';
import { CgroupV2Driver } from '../../../../src/agent/governance/cgroups/v2.js';
import { cgroupDirectory, parseMountinfo, parseOwnCgroups } from '../../../../src/agent/governance/cgroups/mountinfo.js';
import { GovernedProcess } from '../../../../src/agent/governance/governed-process.js';
import { exitError, Governor, runCommand, startServer, systemClock } from '../../../../src/agent/governance/index.js';
import { waitFor } from '../../../helpers/mesh.js';
import { cgroupFile, cgroupGovernor, expectNothingLeft, fixture, FIXTURES, needsCgroups, pidAlive, silentLog } from '../helpers.js';

const MB = 1024 * 1024;
const { governor, skip } = await cgroupGovernor('cgroups-test');
afterAll(() => governor.close());

/** A governor forced to one version, or why that version is not usable here. */
async function forced(version: 'v1' | 'v2'): Promise<{ governor: Governor | null; skip: string | null }> {
  const forcedGovernor = await Governor.create({ agentId: `cgroups-${version}`, config: { cgroups: version }, log: silentLog });
  if (forcedGovernor.cgroupVersion !== null) return { governor: forcedGovernor, skip: null };
  const why = `skipped: cgroup ${version} is not usable here (${forcedGovernor.cgroupsUnavailable})`;
  console.warn(`[cgroups-test] ${why}`);
  return { governor: null, skip: why };
}
const v1 = await forced('v1');
const v2 = await forced('v2');
afterAll(async () => {
  await v1.governor?.close();
  await v2.governor?.close();
});

const sleeper = (target: Governor, limits: { memoryLimitMB: number | null; pidsLimit: number | null; cpuWeight: number }) =>
  target.spawn({ name: 'sleeper', file: '/bin/sleep', args: ['30'], env: process.env, limits, stdio: ['ignore', 'ignore', 'ignore'] });

describe('cgroups: limits, placement, cleanup', () => {
  it.skipIf(skip)(needsCgroups('a program is in its cgroup from its first instruction (it starts behind a gate)', skip), async () => {
    // cat reads its cgroup the moment it runs: placed after spawn instead, it would sometimes still be in the agent's.
    for (let run = 0; run < 5; run++) {
      const result = await runCommand(governor, { name: 'cat-cgroup', settings: { command: 'cat /proc/self/cgroup' } }, silentLog);
      expect(result.ok).toBe(true);
      const leaf = `/gpumesh/cgroups-test.${process.pid}/cat-cgroup-`;
      expect(result.stdout.toString().split('\n').filter((line) => line.includes(leaf)).length).toBeGreaterThan(0);
    }
  });

  it.skipIf(skip)(needsCgroups('the limits are where the kernel reads them, every byte of the program is charged there, and stop leaves nothing', skip), async () => {
    const governed = governor.spawn({
      name: 'node-30mb', file: process.execPath, args: ['-e', 'globalThis.b = Buffer.alloc(30e6, 1); console.log("allocated"); setInterval(() => {}, 1000)'],
      env: process.env, limits: { memoryLimitMB: 256, pidsLimit: 64, cpuWeight: 50 }, stdio: ['ignore', 'pipe', 'ignore'],
    });
    const paths = (governed.container as ProcessCgroup).paths;
    await once(governed.child.stdout!, 'data');
    expect(cgroupFile(paths, 'cgroup.procs').split('\n').map(Number)).toContain(governed.pid);
    if ((governed.container as ProcessCgroup).version === 1) {
      expect(Number(cgroupFile(paths, 'memory.limit_in_bytes'))).toBe(256 * MB);
      if (existsSync(join(paths[0]!, 'memory.memsw.limit_in_bytes'))) expect(Number(cgroupFile(paths, 'memory.memsw.limit_in_bytes'))).toBe(256 * MB);
      expect(cgroupFile(paths, 'pids.max')).toBe('64');
      expect(cgroupFile(paths, 'cpu.shares')).toBe('512');
    } else {
      expect(Number(cgroupFile(paths, 'memory.max'))).toBe(256 * MB);
      expect(cgroupFile(paths, 'pids.max')).toBe('64');
      expect(cgroupFile(paths, 'cpu.weight')).toBe('50');
    }
    // Charges do not move with a process, so the cgroup holds the program's anonymous memory only if it was inside from the start.
    const anon = Number(/RssAnon:\s+(\d+)/.exec(readFileSync(`/proc/${governed.pid}/status`, 'utf8'))![1]) * 1024;
    const charged = Number((governed.container as ProcessCgroup).version === 1 ? cgroupFile(paths, 'memory.usage_in_bytes') : cgroupFile(paths, 'memory.current'));
    expect(anon).toBeGreaterThan(30e6);
    expect(charged).toBeGreaterThan(anon * 0.9);
    const end = await governed.stop(2000, systemClock);
    expect(end.cause).toBe('stop');
    await expectNothingLeft(governed.pid, paths);
  });

  it.skipIf(v1.skip)(needsCgroups('cgroup v1: memory.limit_in_bytes, memsw, pids.max and cpu.shares (weight × 1024 / 100)', v1.skip), async () => {
    const governed = sleeper(v1.governor!, { memoryLimitMB: 100, pidsLimit: 7, cpuWeight: 300 });
    const paths = (governed.container as ProcessCgroup).paths;
    expect(Number(cgroupFile(paths, 'memory.limit_in_bytes'))).toBe(100 * MB);
    if (existsSync(join(paths[0]!, 'memory.memsw.limit_in_bytes'))) expect(Number(cgroupFile(paths, 'memory.memsw.limit_in_bytes'))).toBe(100 * MB);
    if (paths.some((path) => existsSync(join(path, 'pids.max')))) expect(cgroupFile(paths, 'pids.max')).toBe('7');
    if (paths.some((path) => existsSync(join(path, 'cpu.shares')))) expect(cgroupFile(paths, 'cpu.shares')).toBe('3072');
    // All engines together weigh like one busy thread per CPU against the rest of the host.
    const gpumesh = paths.map((path) => dirname(dirname(path)));
    if (gpumesh.some((path) => existsSync(join(path, 'cpu.shares')))) expect(cgroupFile(gpumesh, 'cpu.shares')).toBe(String(Math.min(262_144, 1024 * availableParallelism())));
    await governed.stop(1000, systemClock);
    await expectNothingLeft(governed.pid, paths);
  });

  it.skipIf(v2.skip)(needsCgroups('cgroup v2: memory.max, memory.swap.max = 0, memory.oom.group, pids.max and cpu.weight', v2.skip), async () => {
    const governed = sleeper(v2.governor!, { memoryLimitMB: 100, pidsLimit: 7, cpuWeight: 300 });
    const paths = (governed.container as ProcessCgroup).paths;
    expect(Number(cgroupFile(paths, 'memory.max'))).toBe(100 * MB);
    if (existsSync(join(paths[0]!, 'memory.swap.max'))) expect(cgroupFile(paths, 'memory.swap.max')).toBe('0');
    if (existsSync(join(paths[0]!, 'memory.oom.group'))) expect(cgroupFile(paths, 'memory.oom.group')).toBe('1');
    if (existsSync(join(paths[0]!, 'pids.max'))) expect(cgroupFile(paths, 'pids.max')).toBe('7');
    if (existsSync(join(paths[0]!, 'cpu.weight'))) expect(cgroupFile(paths, 'cpu.weight')).toBe('300');
    if (existsSync(join(paths[0]!, 'cpu.weight'))) expect(cgroupFile([dirname(dirname(paths[0]!))], 'cpu.weight')).toBe(String(Math.min(10_000, 100 * availableParallelism())));
    await governed.stop(1000, systemClock);
    await expectNothingLeft(governed.pid, paths);
  });

  it.skipIf(skip)(needsCgroups('a command that outgrows its memory limit is killed by the kernel and reported as ENGINE_OOM with the limit', skip), async () => {
    const result = await runCommand(governor, { name: 'memory-hog', settings: { command: fixture('memory-hog', '--step-mb 16'), memoryLimitMB: 64 } }, silentLog);
    expect(result.ok).toBe(false);
    expect(result.reason).toMatchObject({ kind: 'oom', memoryLimitMB: 64, signal: 'SIGKILL' });
    expect(result.stdout.toString()).toMatch(/holding \d+ MB/);
    const error = exitError(result.reason);
    expect(error.code).toBe('ENGINE_OOM');
    expect(error.message).toMatch(/exceeded its cgroup memory limit of 64 MB/);
  });

  it.skipIf(skip)(needsCgroups('pids.max stops a process tree from starting more tasks than its limit', skip), async () => {
    // Threads count too: node itself takes about a dozen of the 24.
    const result = await runCommand(governor, { name: 'spawn-many', settings: { command: fixture('spawn-many', '--count 40'), pidsLimit: 24 } }, silentLog);
    expect(result.reason.kind).toBe('exited');
    const [, started, refused] = /started (\d+) refused (\d+)/.exec(result.stdout.toString())!.map(Number);
    expect(refused).toBeGreaterThan(0);
    expect(started).toBeLessThan(24);
  });

  it.skipIf(skip)(needsCgroups('a grandchild that left the process group is still killed through the cgroup (and survives without one)', skip), async () => {
    const settings = { command: fixture('leaves-orphan'), readiness: { logLine: 'orphan pid \\d+' }, stopGraceMs: 1000 };
    const orphanOf = (lines: string[]): number => Number(/orphan pid (\d+)/.exec(lines.join('\n'))![1]);

    const governed = await startServer(governor, { name: 'leaves-orphan', settings }, silentLog);
    await governed.ready;
    const orphan = orphanOf(governed.logTail());
    expect(readFileSync(`/proc/${orphan}/stat`, 'utf8').split(' ')[4]).not.toBe(String(governed.pid)); // its own group
    await governed.stop();
    expect(pidAlive(orphan)).toBe(false);
    await expectNothingLeft(governed.pid, governed.cgroupPaths);

    const ungoverned = Governor.withoutCgroups(silentLog);
    const loose = await startServer(ungoverned, { name: 'leaves-orphan', settings }, silentLog);
    await loose.ready;
    const survivor = orphanOf(loose.logTail());
    await loose.stop();
    expect(pidAlive(survivor)).toBe(true);
    process.kill(survivor, 'SIGKILL');
  });

  it.skipIf(skip)(needsCgroups('a dead agent’s cgroups, and whatever still runs in them, are removed by the next agent to start', skip), async () => {
    const dead = spawnSync('true').pid!; // a pid nobody has now
    const ghostLeaves = governor.cgroupParents.map((parent) => join(dirname(parent), `ghost.${dead}`, 'sd-server-1'));
    const leftover = spawn('/bin/sleep', ['60'], { stdio: 'ignore' });
    await once(leftover, 'spawn');
    for (const leaf of ghostLeaves) {
      mkdirSync(leaf, { recursive: true });
      writeFileSync(join(leaf, 'cgroup.procs'), String(leftover.pid));
    }
    const killed = once(leftover, 'exit');
    const next = await Governor.create({ agentId: 'cgroups-sweeper', log: silentLog });
    try {
      expect(await killed).toEqual([null, 'SIGKILL']);
      for (const leaf of ghostLeaves) expect(existsSync(dirname(leaf))).toBe(false);
    } finally {
      await next.close();
    }
    for (const parent of next.cgroupParents) expect(existsSync(parent)).toBe(false);
  });
});

// This host may bind memory, pids and cpu to v1 (a hybrid host); placement and cgroup.kill work on v2 without them.
const v2Mount = parseMountinfo(readFileSync('/proc/self/mountinfo', 'utf8')).find((mount) => mount.version === 2);
const v2Skip = process.getuid?.() !== 0 ? 'skipped: not root' : !v2Mount ? 'skipped: cgroup v2 is not mounted here' : null;
if (v2Skip) console.warn(`[cgroups-test] v2 placement: ${v2Skip}`);

describe('cgroup v2 placement and cgroup.kill on the real unified hierarchy (no controllers required)', () => {
  it.skipIf(v2Skip)(needsCgroups('a process and the grandchild that left its group are killed with one write to cgroup.kill; the cgroup is removed', v2Skip), async () => {
    const own = parseOwnCgroups(readFileSync('/proc/self/cgroup', 'utf8'));
    const base = cgroupDirectory(v2Mount!, own.v2 ?? '/');
    const driver = await CgroupV2Driver.open({ base, agentDir: `v2-placement.${process.pid}`, require: [] });
    try {
      const governed = GovernedProcess.start({
        name: 'leaves-orphan', file: process.execPath, args: [join(FIXTURES, 'leaves-orphan.mjs')], env: process.env,
        limits: { memoryLimitMB: null, pidsLimit: null, cpuWeight: 100 }, stdio: ['ignore', 'pipe', 'ignore'],
      }, driver, silentLog);
      let output = '';
      governed.child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
      const orphan = Number((await waitFor(() => /orphan pid (\d+)/.exec(output), { what: 'the orphan' }))[1]);
      expect(readFileSync(`/proc/${orphan}/cgroup`, 'utf8')).toContain(`0::${(governed.container as ProcessCgroup).paths[0]!.slice(v2Mount!.mountPoint.length)}`);
      await governed.stop(1000, systemClock);
      expect(pidAlive(orphan)).toBe(false);
      await expectNothingLeft(governed.pid, (governed.container as ProcessCgroup).paths);
    } finally {
      await driver.close();
    }
  });
});
