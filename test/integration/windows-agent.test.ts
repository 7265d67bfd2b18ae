import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { XMLParser } from 'fast-xml-parser';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MeshClient } from '../../src/cli/common/client.js';
import { launchFlags } from '../../src/cli/common/launch.js';
import { ROOT, removeDir, tempDir, waitFor } from '../helpers/mesh.js';
import { gpumesh, gpumeshRun, startServe, type Proc } from '../helpers/processes.js';
import { hasWine, prepareWine, processesWith, runWindowsNode, windowsPath, type WineHost, type WineProcess } from '../helpers/wine.js';

/**
 * A Windows host, proven here under Wine: a real `gpumesh agent` as a Windows process (node.exe from npm, the win32
 * builds of its native dependencies) joins a `gpumesh serve` on Linux over the link and runs jobs — ONNX, a clip
 * through the packaged win32 ffmpeg, an `exec` command that starts children of its own — governed by Job Objects:
 *
 * - the reaper: a leftover of a "previous agent" of its folder (a detached process it recorded) is ended at start;
 * - the limit it asks Windows for (Wine does not enforce memory limits: what the agent passes is checked, and
 *   enforcement is proven on Windows only — docs/operations.md says so);
 * - a job timeout ends the whole tree (TerminateJobObject);
 * - SIGKILL the Wine agent mid-job: every process of the engine's tree is gone within seconds (kill-on-close), and the
 *   job is retried on a Linux agent;
 * - `gpumesh agent drain` reaches a second Windows agent through its named pipe, and it leaves with exit 0.
 *
 * `npm run test:windows` runs this file alone; scripts/wine-env.sh makes the Windows host in .wine/ (minutes, once).
 */
const FIXTURES = join(ROOT, 'test/fixtures');
const data = tempDir('gpumesh-windows-');
const winData = join(data, 'winbox');
const pids = join(data, 'pids');
const processes: Proc[] = [];
const wineAgents: WineProcess[] = [];
let wine: WineHost;
let url: string;
let admin: string;
let client: MeshClient;
let jobsRun = 0;

const treeCommand = (hold?: number): string[] => [
  windowsPath(join(ROOT, '.wine/node/node.exe')), windowsPath(join(FIXTURES, 'engines/tree.mjs')), windowsPath(join(pids, '${JOB_ID}.pids')),
  ...(hold === undefined ? [] : [String(hold)]),
];
/** The Windows engine tree, seen from Linux: its leader (tree.mjs under node.exe) and its children. */
const windowsTree = (): number[] => [...processesWith('node.exe', 'tree.mjs'), ...processesWith('node.exe', 'gpumesh-tree-child')];

async function grant(host: string, classes: string[]): Promise<string> {
  return (await client.request<{ token: string }>('POST', '/v1/grants', { kind: 'agent', host, classes })).token;
}

async function hostView(id: string): Promise<{ connected: boolean; platform: string; governance: string } | undefined> {
  const { hosts } = await client.request<{ hosts: { id: string; connected: boolean; platform: string; governance: string }[] }>('GET', '/v1/hosts');
  return hosts.find((host) => host.id === id);
}

async function startWineAgent(name: string, token: string): Promise<WineProcess> {
  const agent = runWindowsNode(wine, ['bin/gpumesh.js', 'agent', '--join', url, '--grant', token, '--data', windowsPath(winData), '--idle-unload', '600'], data, name);
  wineAgents.push(agent);
  await waitFor(async () => {
    if (agent.child.exitCode !== null) throw new Error(`the Windows agent exited (${agent.child.exitCode}):\n${agent.output()}`);
    return (await hostView('winbox'))?.connected;
  }, { timeoutMs: 90_000, intervalMs: 250, what: 'the Windows agent to link' });
  return agent;
}

/** A job run to its end; counted when the Windows agent ran it. */
async function run(body: Record<string, unknown>): Promise<{ id: string; hosts: string[] }> {
  const { id } = await client.submit(body);
  const end = await client.follow(id);
  const view = await client.job(id);
  expect(end.type, JSON.stringify(view.error)).toBe('succeeded');
  const hosts = view.attempts.map((attempt) => attempt.host);
  if (hosts.at(-1) === 'winbox') jobsRun += 1;
  return { id, hosts };
}

beforeAll(async () => {
  // Never skipped: `npm run setup-tests` installs Wine, and a Windows host nobody tests is one that breaks unseen.
  if (!hasWine()) throw new Error('no wine on PATH: `npm run setup-tests` installs it (Debian: apt-get install wine wine64 gcc-mingw-w64-x86-64-win32)');
  wine = prepareWine();
  mkdirSync(winData, { recursive: true });
  mkdirSync(pids);
  writeFileSync(join(data, 'mesh.yaml'), stringify({
    models: {
      tree: { engine: 'exec', types: ['image'], memoryMB: 16 },
      slowtree: { engine: 'exec', types: ['image'], memoryMB: 16, retries: 0 },
    },
  }));
  // The host's own settings: its commands, their limits and timeouts (the orchestrator can name none of them).
  writeFileSync(join(winData, 'host.yaml'), stringify({
    models: {
      tree: { settings: { command: treeCommand(), memoryLimitMB: 512, timeoutMs: 120_000 } },
      slowtree: { settings: { command: treeCommand(), timeoutMs: 4000, killGraceMs: 500 } },
    },
  }));
  const served = await startServe(data, { GPUMESH_LOG_LEVEL: 'warn' });
  processes.push(served.proc);
  ({ url, admin } = served);
  client = new MeshClient(url, admin);

  // What a crashed agent of this folder left behind: a detached process, recorded, whose agent is gone.
  const leftover = runWindowsNode(wine, [windowsPath(join(FIXTURES, 'wine/leftover.mjs')), windowsPath(winData)], data, 'leftover');
  expect(await leftover.exited(), leftover.output()).toBe(0);
  expect(processesWith('gpumesh-leftover')).toHaveLength(1);

  wine.env.GPUMESH_LOG_LEVEL = 'debug';
  await startWineAgent('winbox-1', await grant('winbox', ['image', 'tensor', 'video']));
}, 900_000);

afterAll(async () => {
  for (const agent of wineAgents) agent.child.kill('SIGKILL');
  for (const proc of processes) proc.child.kill('SIGKILL');
  if (wine) {
    for (const pid of [...windowsTree(), ...processesWith('gpumesh-leftover')]) process.kill(pid, 'SIGKILL');
    console.log(`windows agent: ${jobsRun} jobs run under Wine; no engine process outlived its agent`);
  }
  removeDir(data);
});

describe('a Windows agent (node.exe under Wine) on a Linux orchestrator', () => {
  it('says how it is governed (windows · job objects), having ended what a previous agent of its folder left behind', async () => {
    expect(await hostView('winbox')).toMatchObject({ platform: 'windows', governance: 'job objects' });
    // gpumesh status says so, and names the ffmpeg the Windows host encodes clips with: the packaged win32 build.
    const status = await gpumeshRun(['status', '--data', data]);
    expect(status.code, status.output).toBe(0);
    expect(status.stdout).toMatch(/winbox\s+windows · job objects/);
    expect(status.stdout).toMatch(/winbox\s+ffmpeg: \S.*ffmpeg\.exe \(package; ffmpeg version /);
    expect(wineAgents[0]!.output()).toContain('ended engine processes a previous agent of this data folder left behind');
    await waitFor(() => processesWith('gpumesh-leftover').length === 0, { timeoutMs: 5000, what: 'the leftover to be gone' });
  });

  it('runs ONNX jobs (image, tensor) and a clip through the packaged win32 ffmpeg', async () => {
    expect((await run({ type: 'image', input: { prompt: 'a windows host', width: 64, height: 64, steps: 2 } })).hosts).toEqual(['winbox']);
    expect((await run({ type: 'tensor', input: { x: Array.from({ length: 64 }, () => 0.5) } })).hosts).toEqual(['winbox']);
    expect((await run({ type: 'video', input: { prompt: 'waves', frames: 8, fps: 8, width: 64, height: 64, steps: 2 } })).hosts).toEqual(['winbox']);
  });

  it('a job timeout ends the whole tree (TerminateJobObject)', async () => {
    const { id } = await client.submit({ type: 'image', model: 'slowtree', input: { prompt: 'forever' } });
    await waitFor(() => windowsTree().length === 3, { timeoutMs: 30_000, what: 'the tree of three to start' });
    expect((await client.follow(id)).type).toBe('failed');
    expect((await client.job(id)).error?.message).toMatch(/4000 ms/);
    await waitFor(() => windowsTree().length === 0, { timeoutMs: 5000, what: 'the timed-out tree to be gone' });
    // The agent asked Windows to hold this tree in a job object, and tree's own job for its memory limit (below).
    expect(wineAgents[0]!.output()).toMatch(/"engine":"exec\/node.exe".*"container":"job /);
  });

  it('SIGKILL the Windows agent mid-job: its engine tree is gone within seconds, and the job is retried on Linux', async () => {
    const { id } = await client.submit({ type: 'image', model: 'tree', input: { prompt: 'grow' } });
    await waitFor(() => windowsTree().length === 3, { timeoutMs: 30_000, what: 'the tree of three to start' });
    // What the agent asked Windows for: a job object holding the tree, limited to the host's memoryLimitMB (Wine does
    // not enforce it; Windows does).
    const started = wineAgents[0]!.output().split('\n').filter((line) => line.includes('engine process started')).at(-1)!;
    expect(JSON.parse(started)).toMatchObject({ container: expect.stringMatching(/^job /), limits: { memoryLimitMB: 512 } });
    const agentPids = processesWith('node.exe', 'agent', '--join');
    expect(agentPids.length).toBeGreaterThan(0);
    for (const pid of agentPids) process.kill(pid, 'SIGKILL');
    await waitFor(() => windowsTree().length === 0, { timeoutMs: 5000, what: 'the tree to die with its agent' });

    const linuxData = join(data, 'linuxbox');
    mkdirSync(linuxData);
    writeFileSync(join(linuxData, 'host.yaml'), stringify({ models: { tree: { settings: { command: [process.execPath, join(FIXTURES, 'engines/tree.mjs'), join(pids, 'linux.pids'), '200'] } } } }));
    processes.push(gpumesh(['agent', '--join', url, '--grant', await grant('linuxbox', ['image']), '--data', linuxData]));
    const end = await client.follow(id);
    const view = await client.job(id);
    expect(end.type, JSON.stringify(view.error)).toBe('succeeded');
    expect(view.attempts.map((attempt) => attempt.host)).toEqual(['winbox', 'linuxbox']);
  });

  it('gpumesh agent service --print writes a Task Scheduler task whose command line node.exe splits back into the agent\'s argv', async () => {
    const tricky = 'image,"video" 100% C:\\trailing\\';
    const home = 'C:\\Users\\Ana Lopez\\gpu mesh';
    const printed = runWindowsNode(wine, ['bin/gpumesh.js', 'agent', 'service', '--print', '--join', url, '--data', `${home}\\agent`, '--', '--classes', tricky], data, 'service');
    expect(await printed.exited(), printed.output()).toBe(0);
    const xml = readFileSync(join(data, 'service.out'), 'utf8');
    const task = (new XMLParser({ ignoreDeclaration: true, parseTagValue: false }).parse(xml) as { Task: { Actions: { Exec: { Command: string; Arguments: string; WorkingDirectory: string } }; Triggers: { LogonTrigger: unknown } } }).Task;
    expect(task.Triggers.LogonTrigger).toBeDefined();
    expect(task.Actions.Exec.Command).toBe(windowsPath(wine.nodeExe));
    expect(task.Actions.Exec.WorkingDirectory).toBe(home);
    // The Arguments, given to node.exe as its command line verbatim, come back as the argv the task's agent gets.
    wine.env.TASK_ARGUMENTS = task.Actions.Exec.Arguments;
    const split = runWindowsNode(wine, ['-e', `
      const { spawnSync } = require('node:child_process');
      const run = spawnSync(process.execPath, ['-e', '"console.log(JSON.stringify(process.argv.slice(1)))"', '--', process.env.TASK_ARGUMENTS], { windowsVerbatimArguments: true, encoding: 'utf8' });
      process.stdout.write(run.stdout);`], data, 'task-argv');
    const splitCode = await split.exited();
    delete wine.env.TASK_ARGUMENTS;
    expect(splitCode, split.output()).toBe(0);
    const argv = JSON.parse(readFileSync(join(data, 'task-argv.out'), 'utf8')) as string[];
    expect(argv).toEqual([...launchFlags(), windowsPath(join(wine.app, 'bin/gpumesh.js')), 'agent', '--join', url,
      '--grant-file', `${home}\\agent.grant`, '--data', `${home}\\agent`, '--drain-timeout', '300', '--classes', tricky]);
  });

  it('gpumesh agent drain reaches a Windows agent through its named pipe; it leaves with exit 0', async () => {
    const agent = await startWineAgent('winbox-2', await grant('winbox', ['image', 'tensor', 'video']));
    // Its tree died with the killed agent: nothing of it was left for this one to end.
    expect(agent.output()).not.toContain('left behind');
    expect((await run({ type: 'tensor', input: { x: Array.from({ length: 64 }, () => 0.25) } })).hosts).toEqual(['winbox']);
    const drain = runWindowsNode(wine, ['bin/gpumesh.js', 'agent', 'drain', '--data', windowsPath(winData)], data, 'drain');
    expect(await drain.exited(), drain.output()).toBe(0);
    expect(await agent.exited(), agent.output()).toBe(0);
    expect(jobsRun).toBeGreaterThanOrEqual(4);
  });
});
