import { spawn, type ChildProcess, type StdioOptions } from 'node:child_process';
import type { Writable } from 'node:stream';
import type { Logger } from 'pino';
import { EngineError } from '../core/engine.js';
import type { CgroupDriver, CgroupLimits, ProcessCgroup } from './cgroups/driver.js';
import { moment, type Clock } from '../../protocol/clock.js';
import type { ProcessEnd, StopCause } from './exit-reason.js';
import type { EngineIdentity } from './engine-user.js';

export type StdioSlot = 'pipe' | 'ignore' | 'inherit' | 'ipc';

export interface SpawnSpec {
  /** For logs and the cgroup's name (`onnx/cpu`, `sd-server`, `ffmpeg`). */
  name: string;
  /** The executable (a path; see resolveExecutable). */
  file: string;
  args: readonly string[];
  env: NodeJS.ProcessEnv;
  cwd?: string;
  /** The user it runs as (an agent running as root runs its engines as another); null or absent: the agent's. */
  identity?: EngineIdentity | null;
  limits: CgroupLimits;
  /** fds 0, 1, 2 and optionally 3 (`ipc` for a Node.js child). */
  stdio: readonly StdioSlot[];
  serialization?: 'json' | 'advanced';
}

/**
 * A fixed script, never built from input: wait until the agent has put this
 * process in its cgroup (a line on the gate fd), close the gate, and exec the
 * real program with the arguments as they were given ("$@" is not re-split).
 * EOF without the line means the agent gave up (or died): exit, don't run.
 */
const gateScript = (fd: number): string => `read -r go <&${fd} || exit 125; exec ${fd}<&-; exec "$@"`;
const GATE_SHELL = '/bin/sh';
/** How long to wait for the pipes of an exited process to drain. */
const PIPE_DRAIN_MS = 1000;

/**
 * One engine process, governed: the leader of its own process group (and
 * session), in its own cgroup when the host has them, and cleaned up
 * completely when it ends — its group SIGKILLed, whatever escaped the group
 * killed through the cgroup, the cgroup removed.
 *
 * Placement race: a process moved into a cgroup after it has started leaves
 * the memory it already touched charged to the agent's cgroup, and may fork
 * before the move. So with cgroups it starts as `/bin/sh` blocked on a read
 * from an extra pipe; the agent writes its pid to `cgroup.procs`, then
 * releases it, and sh execs the real program (same pid, same group). Every
 * byte and every task of the real program is governed. The cost is one
 * exec of sh. Without cgroups the program is spawned directly.
 */
export class GovernedProcess {
  readonly name: string;
  readonly child: ChildProcess;
  readonly pid: number;
  readonly cgroup: ProcessCgroup | null;
  /** Resolves once the process has exited and everything it left is gone. Never rejects. */
  readonly ended: Promise<ProcessEnd>;
  #cause: StopCause | null = null;
  #exited = false;
  #end: ProcessEnd | null = null;

  private constructor(name: string, child: ChildProcess, cgroup: ProcessCgroup | null, log: Logger) {
    this.name = name;
    this.child = child;
    this.pid = child.pid!;
    this.cgroup = cgroup;
    // 'close' comes after 'exit' once its pipes are drained: the last lines a crashing process wrote arrive before it.
    const closed = new Promise<void>((resolve) => child.once('close', () => resolve()));
    this.ended = new Promise<ProcessEnd>((resolve) => {
      child.once('exit', (code, signal) => {
        this.#exited = true;
        // Read the OOM count before the cgroup goes; it is final once the leader is dead.
        const oom = cgroup?.oomKills() ?? { kills: 0, exact: true };
        const end: ProcessEnd = { pid: this.pid, code, signal, oom, memoryLimitMB: cgroup?.limits.memoryLimitMB ?? null, cause: this.#cause };
        this.#end = end;
        // Its helpers end with it. (The leader's pid stays reserved while any of them lives, so this reaches only them.)
        signalGroup(this.pid, 'SIGKILL');
        const cleanup = cgroup
          ? cgroup.destroy().catch((error: unknown) => log.warn({ engine: name, pid: this.pid, err: error }, 'could not remove the engine cgroup'))
          : Promise.resolve();
        // Its group and cgroup are dead, so the pipes close; a process that escaped both (no cgroups) may hold them: stop waiting.
        const drained = cleanup.then(() => Promise.race([closed, moment(PIPE_DRAIN_MS)])).then(() => {
          child.stdout?.destroy();
          child.stderr?.destroy();
        });
        void drained.then(() => resolve(end));
      });
    });
  }

  /** Start `spec` in its own group (and cgroup, when `driver` is given). Throws an EngineError if it cannot start. */
  static start(spec: SpawnSpec, driver: CgroupDriver | null, log: Logger): GovernedProcess {
    let cgroup: ReturnType<CgroupDriver['create']> | null;
    try {
      cgroup = driver?.create(spec.name, spec.limits) ?? null;
    } catch (error) {
      // This host's cgroups refused (a full or read-only hierarchy): another host may start it.
      throw new EngineError('ENGINE_FAILED', `cannot start ${spec.name}: its cgroup: ${(error as Error).message}`, true, { cause: error });
    }
    const gateFd = spec.stdio.length;
    const stdio = [...spec.stdio, ...(cgroup ? ['pipe' as const] : [])] as StdioOptions;
    const identity = spec.identity ? { uid: spec.identity.uid, gid: spec.identity.gid } : {};
    const options = { detached: true, stdio, env: spec.env, cwd: spec.cwd, serialization: spec.serialization, ...identity };
    let child: ChildProcess;
    try {
      child = cgroup
        ? spawn(GATE_SHELL, ['-c', gateScript(gateFd), 'gpumesh-gate', spec.file, ...spec.args], options)
        : spawn(spec.file, [...spec.args], options);
    } catch (error) {
      void cgroup?.destroy().catch(() => {});
      throw new EngineError('ENGINE_FAILED', `cannot start ${spec.name} (${spec.file}): ${(error as Error).message}`, false, { cause: error });
    }
    // Spawn errors arrive as events; without a listener they would end the agent.
    child.on('error', (error) => log.warn({ engine: spec.name, err: error }, 'engine process error'));
    if (child.pid === undefined) {
      void cgroup?.destroy().catch(() => {});
      throw new EngineError('ENGINE_FAILED', `cannot start ${spec.name} (${spec.file}): the system refused to create the process`);
    }
    if (cgroup) {
      const gate = child.stdio[gateFd] as Writable;
      gate.on('error', () => { /* sh is gone: its exit is reported as usual */ });
      try {
        cgroup.place(child.pid);
      } catch (error) {
        gate.destroy();
        signalGroup(child.pid, 'SIGKILL');
        void cgroup.destroy().catch(() => {});
        throw new EngineError('ENGINE_FAILED', `cannot put ${spec.name} in its cgroup: ${(error as Error).message}`, true, { cause: error });
      }
      gate.end('go\n');
    }
    return new GovernedProcess(spec.name, child, cgroup, log);
  }

  get running(): boolean {
    return !this.#exited;
  }

  /** How it ended, from the moment its exit is seen (before `ended`, which also waits for the cleanup); null while it runs. */
  get end(): ProcessEnd | null {
    return this.#end;
  }

  /** Why the agent stopped it (null while it has not been asked to stop). */
  get stopCause(): StopCause | null {
    return this.#cause;
  }

  /**
   * End it: SIGTERM to the group, SIGKILL to the group after `graceMs`, then
   * the cleanup every exit gets. Resolves when nothing of it is left.
   */
  async stop(graceMs: number, clock: Clock, cause: StopCause = 'stop'): Promise<ProcessEnd> {
    if (this.#exited) return this.ended;
    this.#cause ??= cause;
    if (!signalGroup(this.pid, 'SIGTERM')) this.child.kill('SIGTERM');
    const timer = clock.setTimer(graceMs, () => {
      // Once the leader is reaped its pid may be reused: signal only while it has not exited.
      if (!this.#exited && !signalGroup(this.pid, 'SIGKILL')) this.child.kill('SIGKILL');
    });
    const end = await this.ended;
    timer.cancel();
    return end;
  }
}

/** Signal a whole process group; false when there is none left. */
export function signalGroup(pgid: number, signal: NodeJS.Signals): boolean {
  try {
    process.kill(-pgid, signal);
    return true;
  } catch {
    return false;
  }
}
