import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { afterAll, afterEach, beforeAll, beforeEach } from 'vitest';
import { MeshClient } from '../../src/cli/common/client.js';
import { launchFlags } from '../../src/cli/common/launch.js';

export const ROOT = new URL('../../', import.meta.url).pathname;
export const BIN = join(ROOT, 'bin/gpumesh.js');
/**
 * tsx's loader by its URL, for engine commands in tests (`node --import ${TSX_LOADER} stand-in.ts`): engine processes
 * run in an empty folder of their own, where a bare `--import tsx` resolves to nothing.
 */
export const TSX_LOADER = import.meta.resolve('tsx');

export { launchFlags };

export interface RunningMesh {
  url: string;
  data: string;
  admin: string;
  galleryUrl: string;
  process: ChildProcess;
  client(grant?: string): MeshClient;
  /** The command line's output so far. */
  output(): string;
  /** SIGTERM and wait; `kill` for SIGKILL. */
  stop(signal?: NodeJS.Signals): Promise<void>;
}

export function tempDir(prefix = 'gpumesh-test-'): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

/** Poll until `check` returns a truthy value (no fixed sleeps). */
export async function waitFor<T>(check: () => T | Promise<T>, { timeoutMs = 20_000, intervalMs = 25, what = 'condition' } = {}): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

/**
 * `gpumesh up` as a real process on a free port and a fresh data folder:
 * orchestrator with its local agent (in-process unless args say `--agent-process`) and its ONNX worker.
 */
export async function startMesh(options: {
  data?: string; config?: Record<string, unknown>; args?: string[]; env?: NodeJS.ProcessEnv;
  /** Options for node itself (e.g. `--cpu-prof`, which NODE_OPTIONS does not allow). */
  nodeArgs?: string[];
  /** Another build's bin/gpumesh.js (a side-by-side comparison of two checkouts); default this one's. */
  bin?: string;
  /** The folder it is started in; default the tests' own. */
  cwd?: string;
} = {}): Promise<RunningMesh> {
  const data = options.data ?? tempDir();
  if (options.config) writeFileSync(join(data, 'mesh.yaml'), stringify(options.config));
  // Started as a person starts it (`gpumesh up`, whose top lines give Node its options), plus any asked for here.
  const bin = options.bin ?? BIN;
  const child = spawn(process.execPath, [...launchFlags(bin), ...(options.nodeArgs ?? []), bin, 'up', '--data', data, '--port', '0', ...(options.args ?? [])], {
    env: { ...process.env, ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
    ...(options.cwd ? { cwd: options.cwd } : {}),
  });
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const galleryUrl = await waitFor(() => {
    if (child.exitCode !== null) throw new Error(`gpumesh up exited with ${child.exitCode}:\n${output}`);
    // Up to the end of its line: output arrives in chunks, and a chunk may end inside the URL.
    return /gallery\s+(\S+)\n/.exec(output)?.[1];
  }, { timeoutMs: 60_000, what: 'gpumesh up to print the gallery URL' });
  const url = new URL(galleryUrl).origin;
  const admin = readFileSync(join(data, 'admin.grant'), 'utf8').trim();
  return {
    url, data, admin, galleryUrl, process: child,
    client: (grant = admin) => new MeshClient(url, grant),
    output: () => output,
    async stop(signal = 'SIGTERM') {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = once(child, 'exit');
      child.kill(signal);
      await exited;
    },
  };
}

/**
 * Temporary folders that last one test: call at the top of a test file; the function it returns makes a folder, and
 * every folder made during a test is removed after it.
 */
export function tempDirsPerTest(): (prefix?: string) => string {
  const dirs: string[] = [];
  afterEach(() => {
    for (const dir of dirs.splice(0)) removeDir(dir);
  });
  return (prefix) => {
    const dir = tempDir(prefix);
    dirs.push(dir);
    return dir;
  };
}

/** Remove a test's data folder (only when the test passed, so a failure leaves its data to inspect). */
export function removeDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}

/**
 * A mesh's data (logs, store) kept to inspect when a test of the file failed or its setup never finished, and
 * removed otherwise. Call in the describe block; `ready()` at the end of its setup, `cleanUp(mesh)` once it stopped.
 */
export function dataKeptOnFailure(): { ready(): void; cleanUp(mesh: RunningMesh | undefined): void } {
  let keep = true;
  beforeEach(({ onTestFailed }) => onTestFailed(() => {
    keep = true;
  }));
  return {
    ready: () => {
      keep = false;
    },
    cleanUp: (mesh) => {
      if (mesh && !keep) removeDir(mesh.data);
    },
  };
}

/**
 * One mesh for a whole test file: started before its tests, stopped after
 * them, its data removed. Returns the running mesh (valid inside tests).
 */
export function meshForFile(options: Parameters<typeof startMesh>[0] = {}): () => RunningMesh {
  let mesh: RunningMesh | undefined;
  beforeAll(async () => {
    mesh = await startMesh(options);
  });
  afterAll(async () => {
    await mesh?.stop();
    if (mesh) removeDir(mesh.data);
  });
  return () => {
    if (!mesh) throw new Error('the mesh is not running (used outside a test?)');
    return mesh;
  };
}
