import { fork, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import type { Logger } from 'pino';

export interface SpawnOptions {
  /** A name for logs. */
  name: string;
  args?: string[];
  env?: NodeJS.ProcessEnv;
  /** Node.js flags for the child; default: none (not the parent's). */
  execArgv?: string[];
}

/**
 * Engine processes, governed without a daemon: each starts as the leader of
 * its own process group (so everything it spawns can be ended with it), talks
 * to the agent over an IPC channel, and is reaped with SIGTERM then SIGKILL to
 * the whole group. A child whose agent dies sees its IPC channel close and exits.
 */
export class Supervisor {
  readonly #log: Logger;
  readonly #children = new Set<ChildProcess>();

  constructor(log: Logger) {
    this.#log = log;
  }

  /** Start a Node.js module as a supervised child with a structured-clone IPC channel. */
  fork(modulePath: string, options: SpawnOptions): ChildProcess {
    const child = fork(modulePath, options.args ?? [], {
      detached: true,
      serialization: 'advanced',
      execArgv: options.execArgv ?? [],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      env: options.env ?? process.env,
    });
    this.#children.add(child);
    this.#log.info({ engine: options.name, pid: child.pid }, 'engine process started');
    child.once('exit', (code, signal) => {
      this.#children.delete(child);
      this.#log.info({ engine: options.name, pid: child.pid, code, signal }, 'engine process exited');
    });
    return child;
  }

  /** End a child and its process group: SIGTERM, then SIGKILL after `graceMs`. */
  async stop(child: ChildProcess, graceMs = 2000): Promise<void> {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = once(child, 'exit');
    this.#signalGroup(child, 'SIGTERM');
    const timer = setTimeout(() => this.#signalGroup(child, 'SIGKILL'), graceMs);
    await exited;
    clearTimeout(timer);
  }

  async stopAll(graceMs = 2000): Promise<void> {
    await Promise.all([...this.#children].map((child) => this.stop(child, graceMs)));
  }

  /** Live engine processes. */
  get count(): number {
    return this.#children.size;
  }

  pids(): number[] {
    return [...this.#children].map((child) => child.pid!).filter(Boolean);
  }

  #signalGroup(child: ChildProcess, signal: NodeJS.Signals): void {
    try {
      process.kill(-child.pid!, signal);
    } catch {
      // The group is already gone; signal the child itself in case it left its group.
      try { child.kill(signal); } catch { /* already exited */ }
    }
  }
}
