import { basename } from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { classifyExit } from '../../governance/exit-reason.js';
import { resolveExecutable } from '../../governance/executable.js';
import type { Governor } from '../../governance/governor.js';
import { ProcessLimits } from '../../../protocol/engines/process-settings.js';
import { StdoutLines, Tail, type CommandHooks, type CommandResult, type CommandRunner, type CommandSpec } from './runner.js';

/** The smaller of two limits, where absent means none. */
const stricter = (model: number | null | undefined, host: number | undefined): number | null | undefined =>
  host === undefined ? model : model === null || model === undefined ? host : Math.min(model, host);

/**
 * Runs each command under the agent's governance, like its servers: its own
 * process group and, where the host allows, its own cgroup with the model's
 * limits (held to the host's ceilings for the `exec` engine), so a command
 * that runs out of memory is killed alone and reported as such (`oom`, which
 * the engine turns into ENGINE_OOM naming the limit). A timeout or a cancel
 * ends the whole group, and the cgroup catches what escaped it.
 */
export class GovernedCommandRunner implements CommandRunner {
  readonly #governor: Governor;

  constructor(governor: Governor) {
    this.#governor = governor;
  }

  handOver(path: string): Promise<void> {
    return this.#governor.handOver(path);
  }

  async run(spec: CommandSpec, hooks: CommandHooks = {}): Promise<CommandResult> {
    const stdoutTail = new Tail(spec.maxOutputBytes);
    const stderrTail = new Tail(spec.maxOutputBytes);
    const failed = (spawnError: string): CommandResult => ({ exitCode: null, signal: null, stopped: null, spawnError, oom: null, stdoutTail: '', stderrTail: '' });
    const host = this.#governor.config.engines.exec ?? {};
    let governed;
    let name = spec.argv[0]!;
    try {
      const file = resolveExecutable(spec.argv[0]!, spec.env, spec.cwd);
      name = `exec/${basename(file)}`;
      governed = this.#governor.spawn({
        name, file, args: spec.argv.slice(1), env: spec.env, cwd: spec.cwd,
        limits: ProcessLimits.parse({
          memoryLimitMB: stricter(spec.limits?.memoryLimitMB, host.memoryLimitMB),
          pidsLimit: stricter(spec.limits?.pidsLimit, host.pidsLimit),
          cpuWeight: stricter(spec.limits?.cpuWeight, host.cpuWeight),
        }),
        stdio: [spec.stdin === null ? 'ignore' : 'pipe', 'pipe', 'pipe'],
      });
    } catch (error) {
      return failed((error as Error).message);
    }
    const lines = new StdoutLines(hooks.onStdoutLine);
    (governed.child.stdout as Readable).on('data', (chunk: Buffer) => {
      stdoutTail.push(chunk);
      lines.push(chunk);
    });
    (governed.child.stderr as Readable).on('data', (chunk: Buffer) => stderrTail.push(chunk));
    if (spec.stdin !== null) {
      const stdin = governed.child.stdin as Writable;
      stdin.on('error', () => { /* it exited without reading everything: its exit says why */ });
      stdin.end(spec.stdin);
    }
    const { clock } = this.#governor;
    let stopped: CommandResult['stopped'] = null;
    const stop = (why: 'timeout' | 'cancelled'): void => {
      if (stopped) return;
      stopped = why;
      void governed.stop(spec.killGraceMs, clock, why === 'timeout' ? 'timeout' : 'stop');
    };
    const timer = clock.setTimer(spec.timeoutMs, () => stop('timeout'));
    const onAbort = (): void => stop('cancelled');
    if (hooks.signal?.aborted) onAbort();
    else hooks.signal?.addEventListener('abort', onAbort, { once: true });
    const end = await governed.ended;
    timer.cancel();
    hooks.signal?.removeEventListener('abort', onAbort);
    lines.end();
    const reason = classifyExit(end, { name, logTail: [] });
    return {
      exitCode: end.code, signal: end.signal, stopped, spawnError: null, oom: reason.kind === 'oom' ? reason.message : null,
      stdoutTail: stdoutTail.toString(), stderrTail: stderrTail.toString(),
    };
  }
}
