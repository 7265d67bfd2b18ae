import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { ROOT, waitFor } from './mesh.js';

/** A stand-in server running as a real process on a port it chose. */
export interface StandIn {
  url: string;
  child: ChildProcess;
  /** Change its misbehaviour knobs (merged into the current ones). */
  knobs(knobs: Record<string, unknown>): Promise<void>;
  /** What it recorded (requests, deletions, interrupts, …). */
  state<T = Record<string, unknown>>(): Promise<T>;
  /** Its stdout and stderr so far. */
  output(): string;
  stop(): Promise<void>;
}

/** Start `test/fixtures/standins/<name>-standin.ts` and wait until it prints where it listens. */
export async function startStandIn(name: 'comfyui' | 'oip', args: string[] = []): Promise<StandIn> {
  const script = join(ROOT, 'test/fixtures/standins', `${name}-standin.ts`);
  const child = spawn(process.execPath, ['--import', 'tsx', script, '--port', '0', ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = once(child, 'exit');
  const url = await waitFor(() => {
    if (child.exitCode !== null) throw new Error(`${name}-standin exited with ${child.exitCode}:\n${output}`);
    return new RegExp(`${name}-standin listening on (http://\\S+)`).exec(output)?.[1];
  }, { timeoutMs: 30_000, what: `${name}-standin to listen` });
  return {
    url, child,
    output: () => output,
    async knobs(knobs) {
      const response = await fetch(`${url}/standin/knobs`, { method: 'POST', body: JSON.stringify(knobs) });
      if (!response.ok) throw new Error(`${name}-standin refused knobs: ${response.status}`);
    },
    async state<T>() {
      return (await (await fetch(`${url}/standin/state`)).json()) as T;
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
    },
  };
}
