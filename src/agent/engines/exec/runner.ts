import { spawn } from 'node:child_process';
import { workClock, type Clock, type Timer } from '../../../protocol/clock.js';

/** One command to run. */
export interface CommandSpec {
  /** Program and arguments; never interpreted by a shell. */
  argv: string[];
  cwd?: string;
  env: NodeJS.ProcessEnv;
  /** Written to the command's stdin, which is then closed; null: no stdin. */
  stdin: string | null;
  /** The command is ended (SIGTERM, then SIGKILL) once it runs this long. */
  timeoutMs: number;
  /** Bytes of stdout and of stderr kept, each (the last ones). */
  maxOutputBytes: number;
  /** Time between SIGTERM and SIGKILL. */
  killGraceMs: number;
  /** The model's limits for the command's cgroup (a governed runner applies them; the local runner has no cgroups). */
  limits?: { memoryLimitMB?: number; pidsLimit?: number; cpuWeight?: number };
}

export interface CommandHooks {
  /** Each complete stdout line (lines longer than the limit are cut short). */
  onStdoutLine?(line: string): void;
  /** Aborting ends the command's whole process group. */
  signal?: AbortSignal;
}

export interface CommandResult {
  /** Null when it ended by a signal or never started. */
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  /** Why gpumesh stopped it, if it did. */
  stopped: 'timeout' | 'cancelled' | null;
  /** It could not be started (ENOENT, EACCES…). */
  spawnError: string | null;
  /** The kernel killed it at its cgroup's memory limit: why, naming the limit (governed runners only; else null). */
  oom?: string | null;
  stdoutTail: string;
  stderrTail: string;
}

/**
 * Runs one command to its end. The local runner below is the small built-in
 * one; a governed runner (cgroups, the agent's process table) can take its
 * place behind this interface.
 */
export interface CommandRunner {
  run(spec: CommandSpec, hooks?: CommandHooks): Promise<CommandResult>;
  /** A folder the agent prepared for a run (its scratch), given to whoever the command runs as. Default: nothing to do. */
  handOver?(path: string): Promise<void>;
}

/** The last `limit` bytes of a stream. */
export class Tail {
  #chunks: Buffer[] = [];
  #bytes = 0;
  constructor(readonly limit: number) {}

  push(chunk: Buffer): void {
    this.#chunks.push(chunk);
    this.#bytes += chunk.length;
    while (this.#bytes - this.#chunks[0]!.length >= this.limit) this.#bytes -= this.#chunks.shift()!.length;
  }

  toString(): string {
    const all = Buffer.concat(this.#chunks);
    return all.subarray(Math.max(0, all.length - this.limit)).toString('utf8');
  }
}

/** The longest stdout line handed to `onStdoutLine`; more of a line is dropped, so a flood cannot grow memory. */
const MAX_LINE_BYTES = 64 * 1024;

/** Complete stdout lines out of chunks, each at most MAX_LINE_BYTES (the rest of a longer line is dropped). */
export class StdoutLines {
  #partial = Buffer.alloc(0);
  #overlong = false;

  constructor(private readonly onLine: ((line: string) => void) | undefined) {}

  push(chunk: Buffer): void {
    if (!this.onLine) return;
    let rest = chunk;
    for (let newline = rest.indexOf(10); newline >= 0; newline = rest.indexOf(10)) {
      const line = Buffer.concat([this.#partial, rest.subarray(0, newline)]);
      if (!this.#overlong) this.onLine(line.subarray(0, MAX_LINE_BYTES).toString('utf8').replace(/\r$/, ''));
      this.#partial = Buffer.alloc(0);
      this.#overlong = false;
      rest = rest.subarray(newline + 1);
    }
    if (this.#overlong) return;
    this.#partial = Buffer.concat([this.#partial, rest]);
    if (this.#partial.length > MAX_LINE_BYTES) {
      this.#overlong = true; // this line is dropped up to its end
      this.#partial = Buffer.alloc(0);
    }
  }

  /** The stream ended: a last line without a newline is a line too. */
  end(): void {
    if (this.#partial.length > 0 && !this.#overlong) this.onLine?.(this.#partial.toString('utf8'));
    this.#partial = Buffer.alloc(0);
  }
}

/**
 * Spawns without a shell, as the leader of a new process group (`detached`),
 * so a timeout or a cancel ends everything the command started: SIGTERM to
 * the group, SIGKILL after the grace. When the leader exits, what it left
 * running in its group is killed too — a batch leaves nothing behind.
 */
export class LocalCommandRunner implements CommandRunner {
  readonly #clock: Clock;

  /** `clock`: for the command's timeout and kill grace (a fake in tests). Default: real time, keeping the process alive. */
  constructor(clock: Clock = workClock) {
    this.#clock = clock;
  }

  run(spec: CommandSpec, hooks: CommandHooks = {}): Promise<CommandResult> {
    const clock = this.#clock;
    return new Promise((resolve) => {
      const stdoutTail = new Tail(spec.maxOutputBytes);
      const stderrTail = new Tail(spec.maxOutputBytes);
      let stopped: CommandResult['stopped'] = null;
      let spawnError: string | null = null;
      const child = spawn(spec.argv[0]!, spec.argv.slice(1), {
        cwd: spec.cwd, env: spec.env, detached: true, shell: false,
        stdio: [spec.stdin === null ? 'ignore' : 'pipe', 'pipe', 'pipe'],
      });
      const signalGroup = (signal: NodeJS.Signals): void => {
        if (!child.pid) return;
        try { process.kill(-child.pid, signal); } catch { /* the group is gone */ }
      };
      let killTimer: Timer | null = null;
      const stop = (why: 'timeout' | 'cancelled'): void => {
        if (stopped || child.exitCode !== null || child.signalCode !== null) return;
        stopped = why;
        signalGroup('SIGTERM');
        killTimer = clock.setTimer(spec.killGraceMs, () => signalGroup('SIGKILL'));
      };
      const timeout = clock.setTimer(spec.timeoutMs, () => stop('timeout'));
      const onAbort = (): void => stop('cancelled');
      if (hooks.signal?.aborted) queueMicrotask(onAbort);
      else hooks.signal?.addEventListener('abort', onAbort, { once: true });

      const lines = new StdoutLines(hooks.onStdoutLine);
      child.stdout!.on('data', (chunk: Buffer) => {
        stdoutTail.push(chunk);
        lines.push(chunk);
      });
      child.stderr!.on('data', (chunk: Buffer) => stderrTail.push(chunk));
      // A command that does not read its stdin closes the pipe; that is not an error of ours.
      child.stdin?.on('error', () => {});
      child.stdin?.end(spec.stdin ?? undefined);

      child.once('error', (error) => {
        spawnError = error.message;
      });
      let closeGuard: Timer | null = null;
      child.once('exit', () => {
        // What the leader left behind in its group goes with it.
        signalGroup('SIGKILL');
        // A process that left the group may still hold our pipes; do not wait on it forever.
        closeGuard = clock.setTimer(spec.killGraceMs, () => {
          child.stdout?.destroy();
          child.stderr?.destroy();
        });
      });
      child.once('close', (exitCode, signal) => {
        timeout.cancel();
        killTimer?.cancel();
        closeGuard?.cancel();
        hooks.signal?.removeEventListener('abort', onAbort);
        lines.end();
        resolve({ exitCode, signal, stopped, spawnError, oom: null, stdoutTail: stdoutTail.toString(), stderrTail: stderrTail.toString() });
      });
    });
  }
}
