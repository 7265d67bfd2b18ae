import { spawn, type ChildProcess, type StdioOptions } from 'node:child_process';
import type { Writable } from 'node:stream';
import type { Logger } from 'pino';
import { EngineError } from '../core/engine.js';
import type { CgroupLimits, ContainerDriver, ProcessContainer } from './contract/containment.js';
import { moment, type Clock } from '../../protocol/clock.js';
import type { ProcessEnd, StopCause } from './exit-reason.js';
import type { EngineIdentity } from './engine-user.js';
import { groupMembers } from './process-memory.js';

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
/**
 * The portable lifeline, a fixed script too: the program runs in the background of a shell that leads its process
 * group and waits on a pipe from the agent (fd `fd`), which the agent never writes to. However the agent ends — a
 * crash, SIGKILL — the system closes its end, the read returns, and the shell kills its whole group: the tree dies with
 * the agent, where nothing else would see to it (a process group does not end with its parent).
 * The shell passes the agent's SIGTERM and SIGINT on to the program, waits for it, and ends as it ended — by the same
 * signal, or with its exit code — so its end reads as the program's.
 */
const lifelineScript = (fd: number): string => [
  'exec 4<&0', `"$@" <&4 4<&- ${fd}<&- &`, 'child=$!', 'exec 4<&- 0</dev/null',
  'trap \'kill -TERM "$child" 2>/dev/null\' TERM', 'trap \'kill -INT "$child" 2>/dev/null\' INT',
  `( read -r _ <&${fd}; kill -KILL 0 ) & watch=$!`, `exec ${fd}<&-`,
  'while :; do wait "$child"; status=$?; kill -0 "$child" 2>/dev/null || break; done',
  'kill "$watch" 2>/dev/null',
  'if [ "$status" -gt 128 ]; then trap - TERM INT; kill -s "$(kill -l "$status")" $$; fi',
  'exit "$status"',
].join('\n');
const SHELL = '/bin/sh';
const WINDOWS = process.platform === 'win32';
/** How long to wait for the pipes of an exited process to drain. */
const PIPE_DRAIN_MS = 1000;

/** How a platform starts and ends one engine tree (the Governor's choice, from its GovernanceKind). */
export interface StartOptions {
  /** The portable lifeline: the tree dies with the agent through a pipe (lifelineScript). Not for a Node.js child with IPC, which ends itself when its channel closes. */
  lifeline?: boolean;
}

/**
 * One engine process tree, governed: the leader of its own process group (and
 * session), in its own container where the platform has one — a cgroup on
 * Linux, a Job Object on Windows — and cleaned up completely when it ends: its
 * group SIGKILLed (its job terminated), whatever escaped the group killed
 * through the container, the container let go.
 *
 * Placement race: a process moved into a cgroup after it has started leaves
 * the memory it already touched charged to the agent's cgroup, and may fork
 * before the move. So with cgroups it starts as `/bin/sh` blocked on a read
 * from an extra pipe; the agent writes its pid to `cgroup.procs`, then
 * releases it, and sh execs the real program (same pid, same group). Every
 * byte and every task of the real program is governed. The cost is one
 * exec of sh. A Job Object takes the process right after it starts (its later
 * children join it by themselves). Without a container the program is spawned
 * directly — behind the lifeline where the Governor asks for one.
 *
 * Windows has no process groups to signal and no SIGTERM: stopping a Node.js
 * engine there closes its IPC channel (it ends itself), and a tree is ended for
 * sure by terminating its job.
 */
export class GovernedProcess {
  readonly name: string;
  readonly child: ChildProcess;
  readonly pid: number;
  /** Its container (a cgroup, a Job Object), or null. */
  readonly container: ProcessContainer | null;
  /** Resolves once the process has exited and everything it left is gone. Never rejects. */
  readonly ended: Promise<ProcessEnd>;
  #cause: StopCause | null = null;
  #exited = false;
  #end: ProcessEnd | null = null;
  /** The agent's end of the lifeline, held open for the tree's life (never written to). */
  readonly #lifeline: Writable | null;
  /** What it may hold; enforced by its container where it has one, else by the agent's polling (Governor). */
  readonly limits: CgroupLimits;
  /** What its processes held when it was stopped for its memory. */
  #heldMB: number | undefined;

  private constructor(name: string, child: ChildProcess, container: ProcessContainer | null, lifeline: Writable | null, limits: CgroupLimits, log: Logger) {
    this.name = name;
    this.limits = limits;
    this.child = child;
    this.pid = child.pid!;
    this.container = container;
    this.#lifeline = lifeline;
    // 'close' comes after 'exit' once its pipes are drained: the last lines a crashing process wrote arrive before it.
    const closed = new Promise<void>((resolve) => child.once('close', () => resolve()));
    this.ended = new Promise<ProcessEnd>((resolve) => {
      child.once('exit', (code, signal) => {
        this.#exited = true;
        // Read the OOM count before the container goes; it is final once the leader is dead.
        const oom = container?.oomKills() ?? { kills: 0, exact: true };
        const overMemory = this.#cause === 'memory';
        const end: ProcessEnd = {
          pid: this.pid, code, signal, oom, memoryLimitMB: container?.limits.memoryLimitMB ?? (overMemory ? limits.memoryLimitMB : null), cause: this.#cause,
          ...(overMemory && this.#heldMB !== undefined ? { heldMB: this.#heldMB } : {}),
        };
        this.#end = end;
        // Its helpers end with it. (The leader's pid stays reserved while any of them lives, so this reaches only them.)
        if (!WINDOWS) signalGroup(this.pid, 'SIGKILL');
        this.#lifeline?.destroy();
        const cleanup = container
          ? container.destroy().catch((error: unknown) => log.warn({ engine: name, pid: this.pid, err: error }, 'could not let the engine\'s container go'))
          : Promise.resolve();
        // Its group and container are dead, so the pipes close; a process that escaped both may hold them: stop waiting.
        const drained = cleanup.then(() => Promise.race([closed, moment(PIPE_DRAIN_MS)])).then(() => {
          child.stdout?.destroy();
          child.stderr?.destroy();
        });
        void drained.then(() => resolve(end));
      });
    });
  }

  /** Start `spec` in its own group, and container when `driver` is given. Throws an EngineError if it cannot start. */
  static start(spec: SpawnSpec, driver: ContainerDriver | null, log: Logger, options: StartOptions = {}): GovernedProcess {
    let container: ProcessContainer | null;
    try {
      container = driver?.create(spec.name, spec.limits) ?? null;
    } catch (error) {
      // This host's containers refused (a full or read-only cgroup hierarchy, Windows out of handles): another host may start it.
      throw new EngineError('ENGINE_FAILED', `cannot start ${spec.name}: its container (${driver!.kind}): ${(error as Error).message}`, true, { cause: error });
    }
    const gated = container !== null && driver!.placesBeforeStart;
    const lifeline = !WINDOWS && !gated && options.lifeline === true && !spec.stdio.includes('ipc');
    const extraFd = spec.stdio.length;
    const stdio = [...spec.stdio, ...(gated || lifeline ? ['pipe' as const] : [])] as StdioOptions;
    const identity = spec.identity ? { uid: spec.identity.uid, gid: spec.identity.gid } : {};
    const spawnOptions = {
      detached: true, windowsHide: true, stdio, env: spec.env, cwd: spec.cwd, serialization: spec.serialization, ...identity,
    };
    let child: ChildProcess;
    try {
      child = gated
        ? spawn(SHELL, ['-c', gateScript(extraFd), 'gpumesh-gate', spec.file, ...spec.args], spawnOptions)
        : lifeline
          ? spawn(SHELL, ['-c', lifelineScript(extraFd), 'gpumesh-lifeline', spec.file, ...spec.args], spawnOptions)
          : spawn(spec.file, [...spec.args], spawnOptions);
    } catch (error) {
      void container?.destroy().catch(() => {});
      throw new EngineError('ENGINE_FAILED', `cannot start ${spec.name} (${spec.file}): ${(error as Error).message}`, false, { cause: error });
    }
    // Spawn errors arrive as events; without a listener they would end the agent.
    child.on('error', (error) => log.warn({ engine: spec.name, err: error }, 'engine process error'));
    if (child.pid === undefined) {
      void container?.destroy().catch(() => {});
      throw new EngineError('ENGINE_FAILED', `cannot start ${spec.name} (${spec.file}): the system refused to create the process`);
    }
    const extra = gated || lifeline ? child.stdio[extraFd] as Writable : null;
    extra?.on('error', () => { /* the shell is gone: its exit is reported as usual */ });
    if (container) {
      try {
        container.place(child.pid);
      } catch (error) {
        extra?.destroy();
        if (WINDOWS) child.kill();
        else signalGroup(child.pid, 'SIGKILL');
        void container.destroy().catch(() => {});
        throw new EngineError('ENGINE_FAILED', `cannot put ${spec.name} in its container (${driver!.kind}): ${(error as Error).message}`, true, { cause: error });
      }
      if (gated) extra!.end('go\n');
    }
    return new GovernedProcess(spec.name, child, container, lifeline ? extra : null, spec.limits, log);
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
   * The processes of its tree now: its container's list where it has one, else its process group's members (the
   * leader alone where the system will not say).
   */
  processIds(): number[] {
    if (this.#exited) return [];
    return this.container?.pids() ?? groupMembers(this.pid) ?? [this.pid];
  }

  /**
   * End it: gracefully first — SIGTERM to the group (on Windows: a Node.js engine's IPC channel closed) —, for sure after
   * `graceMs` — SIGKILL to the group, its job terminated —, then the cleanup every exit gets. Resolves when nothing of
   * it is left.
   */
  async stop(graceMs: number, clock: Clock, cause: StopCause = 'stop'): Promise<ProcessEnd> {
    if (this.#exited) return this.ended;
    this.#cause ??= cause;
    if (WINDOWS) {
      // No SIGTERM to give: a Node.js engine ends itself when its channel closes; anything else waits for the hard end.
      if (this.child.connected) this.child.disconnect();
    } else if (!signalGroup(this.pid, 'SIGTERM')) this.child.kill('SIGTERM');
    const timer = clock.setTimer(graceMs, () => {
      // Once the leader is reaped its pid may be reused: signal only while it has not exited.
      if (this.#exited) return;
      if (WINDOWS) void this.#terminate();
      else if (!signalGroup(this.pid, 'SIGKILL')) this.child.kill('SIGKILL');
    });
    const end = await this.ended;
    timer.cancel();
    return end;
  }

  /** Stop it for holding `heldMB`, more than its memory limit (the agent's polling, where no container enforces it). */
  stopForMemory(heldMB: number, graceMs: number, clock: Clock): Promise<ProcessEnd> {
    this.#heldMB ??= heldMB;
    return this.stop(graceMs, clock, 'memory');
  }

  /** Windows' hard end: the whole job at once, or the leader alone where there is no job. */
  async #terminate(): Promise<void> {
    if (this.container) await this.container.destroy().catch(() => this.child.kill());
    else this.child.kill();
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
