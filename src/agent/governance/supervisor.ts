import type { ChildProcess } from 'node:child_process';
import type { Logger } from 'pino';
import type { EngineError } from '../core/engine.js';
import { classifyExit, exitError } from './exit-reason.js';
import { Governor } from './governor.js';
import type { GovernedProcess } from './governed-process.js';
import { ProcessLimits, type ProcessLimitsInput } from '../../protocol/engines/process-settings.js';

export interface SpawnOptions {
  /** A name for logs (and the cgroup's name). */
  name: string;
  args?: string[];
  env?: NodeJS.ProcessEnv;
  /** Node.js flags for the child; default: none (not the parent's). */
  execArgv?: string[];
  /** Limits for this child; default: the supervisor's. */
  limits?: ProcessLimitsInput;
}

/**
 * Node.js engine processes (the ONNX worker), governed like every engine
 * process: each is the leader of its own process group and, where the host
 * allows, in its own cgroup with the configured limits; it talks to the agent
 * over an IPC channel and is reaped with SIGTERM then SIGKILL to the whole
 * group, its cgroup emptied and removed. A child whose agent dies sees its IPC
 * channel close and exits.
 */
export class Supervisor {
  readonly #log: Logger;
  readonly #governor: Governor;
  readonly #limits: ProcessLimits;
  readonly #children = new Map<ChildProcess, GovernedProcess>();
  /** Every child started, live or not, so its end can be asked about after its exit. */
  readonly #governed = new WeakMap<ChildProcess, GovernedProcess>();

  /** `governor` defaults to process groups only; `limits` to ProcessLimits' defaults. */
  constructor(log: Logger, governor: Governor = Governor.withoutCgroups(log), limits: ProcessLimitsInput = {}) {
    this.#log = log;
    this.#governor = governor;
    this.#limits = ProcessLimits.parse(limits);
  }

  /** The governor its children run under, for engines that start servers or commands of their own. */
  get governor(): Governor {
    return this.#governor;
  }

  /** Start a Node.js module as a supervised child with a structured-clone IPC channel. */
  fork(modulePath: string, options: SpawnOptions): ChildProcess {
    const governed = this.#governor.spawn({
      name: options.name,
      file: process.execPath,
      args: [...(options.execArgv ?? []), modulePath, ...(options.args ?? [])],
      env: options.env ?? process.env,
      limits: options.limits ? ProcessLimits.parse(options.limits) : this.#limits,
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      serialization: 'advanced',
    });
    const child = governed.child;
    this.#children.set(child, governed);
    this.#governed.set(child, governed);
    this.#log.info({ engine: options.name, pid: child.pid, cgroup: governed.container?.paths[0] ?? null }, 'engine process started');
    child.once('exit', (code, signal) => {
      this.#children.delete(child);
      this.#log.info({ engine: options.name, pid: child.pid, code, signal }, 'engine process exited');
    });
    return child;
  }

  /** End a child and its process group: SIGTERM, then SIGKILL after `graceMs`; its cgroup is gone when this resolves. */
  async stop(child: ChildProcess, graceMs = 2000): Promise<void> {
    const governed = this.#children.get(child);
    if (governed) await governed.stop(graceMs, this.#governor.clock);
  }

  async stopAll(graceMs = 2000): Promise<void> {
    await Promise.all([...this.#children.values()].map((governed) => governed.stop(graceMs, this.#governor.clock)));
  }

  /**
   * ENGINE_OOM (with the limit) if the kernel killed this child for its cgroup's memory limit; null otherwise.
   * Known from the moment its exit is seen, so an 'exit' listener can use it.
   */
  oomError(child: ChildProcess): EngineError | null {
    const governed = this.#governed.get(child);
    const end = governed?.end;
    if (!governed || !end) return null;
    const reason = classifyExit(end, { name: governed.name, logTail: [] });
    return reason.kind === 'oom' ? exitError(reason) : null;
  }

  /** Live engine processes. */
  get count(): number {
    return this.#children.size;
  }

  pids(): number[] {
    return [...this.#children.keys()].map((child) => child.pid!).filter(Boolean);
  }
}
