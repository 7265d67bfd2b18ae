import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { gpumeshArgs } from '../../src/cli/common/launch.js';
import { waitFor } from './mesh.js';

/**
 * A port nothing listens on right now. The kernel may hand it out again at once: take it after the test's own
 * servers listen, and take several with `freePorts`, never with several calls of this.
 */
export async function freePort(): Promise<number> {
  return (await freePorts(1))[0]!;
}

/** `count` distinct ports nothing listens on right now: each is held until all are found. */
export async function freePorts(count: number): Promise<number[]> {
  const servers = Array.from({ length: count }, () => createServer().listen(0, '127.0.0.1'));
  await Promise.all(servers.map((server) => once(server, 'listening')));
  const ports = servers.map((server) => {
    const address = server.address();
    if (typeof address !== 'object' || !address) throw new Error('no port');
    return address.port;
  });
  await Promise.all(servers.map((server) => new Promise((resolve) => server.close(resolve))));
  return ports;
}

export interface Proc {
  child: ChildProcess;
  /** stdout and stderr together, as they came. */
  output(): string;
  /** stdout alone (what a script would capture). */
  stdout(): string;
  exited(): Promise<number | null>;
  kill(signal?: NodeJS.Signals): Promise<void>;
}

/** Run `gpumesh <args>` as a real process, collecting its output; `cwd`: the folder it runs in (default this one). */
export function gpumesh(args: string[], env: NodeJS.ProcessEnv = {}, cwd?: string): Proc {
  const child = spawn(process.execPath, gpumeshArgs(args), { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'], ...(cwd ? { cwd } : {}) });
  let output = '';
  let stdout = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    output += chunk.toString();
    stdout += chunk.toString();
  });
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exit = once(child, 'exit').then(([code]) => code as number | null);
  return {
    child,
    output: () => output,
    stdout: () => stdout,
    exited: () => exit,
    async kill(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      await exit;
    },
  };
}

/** Run a gpumesh command to completion. */
export async function gpumeshRun(args: string[], env: NodeJS.ProcessEnv = {}, cwd?: string): Promise<{ code: number | null; output: string; stdout: string }> {
  const proc = gpumesh(args, env, cwd);
  const code = await proc.exited();
  return { code, output: proc.output(), stdout: proc.stdout() };
}

export async function waitHealthy(url: string): Promise<void> {
  await waitFor(async () => {
    try {
      return (await fetch(`${url}/healthz`)).ok;
    } catch {
      return false;
    }
  }, { timeoutMs: 30_000, what: `${url} to answer /healthz` });
}

/**
 * What an orchestrator sharing a PostgreSQL store says it is (`/healthz`): `active` (it runs the mesh), `standby`, or
 * null when it does not answer within a second (killed, or its cable pulled).
 */
export async function orchestratorRole(url: string): Promise<'active' | 'standby' | null> {
  try {
    const body = (await (await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(1000) })).json()) as { role?: string };
    return body.role === 'standby' ? 'standby' : 'active';
  } catch {
    return null;
  }
}

/** A `gpumesh serve` a test started on its data folder, once it listens: its process, URL and admin grant. */
export interface ServedMesh {
  proc: Proc;
  url: string;
  admin: string;
}

/**
 * Start `gpumesh serve --data <data> --port 0` (with `env`), and wait until it listens and has written its admin
 * grant: the URL is the one it recorded in <data>/listen.json. A serve that exits first fails the wait with its output.
 */
export async function startServe(data: string, env: NodeJS.ProcessEnv = {}): Promise<ServedMesh> {
  const proc = gpumesh(['serve', '--data', data, '--port', '0'], env);
  const { url } = await waitFor(() => {
    if (proc.child.exitCode !== null) throw new Error(`gpumesh serve exited:\n${proc.output()}`);
    if (!existsSync(join(data, 'admin.grant'))) return null;
    try {
      return JSON.parse(readFileSync(join(data, 'listen.json'), 'utf8')) as { url: string };
    } catch {
      return null;
    }
  }, { timeoutMs: 60_000, what: 'gpumesh serve to listen' });
  await waitHealthy(url);
  return { proc, url, admin: readFileSync(join(data, 'admin.grant'), 'utf8').trim() };
}
