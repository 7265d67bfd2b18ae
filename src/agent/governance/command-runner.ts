import type { Readable, Writable } from 'node:stream';
import type { Logger } from 'pino';
import { classifyExit, type ExitReason } from './exit-reason.js';
import type { Governor } from './governor.js';
import { prepareLaunch } from './launch.js';
import { LogTail } from './log-tail.js';
import { CommandSettings, type CommandSettingsInput } from '../../protocol/engines/process-settings.js';

export interface CommandInvocation {
  /** For logs, the cgroup's name and errors (`ffmpeg`). */
  name: string;
  settings: CommandSettingsInput;
  /** The template's variables (`${INPUT}`, `${OUTPUT}`, …). */
  variables?: Record<string, string>;
  /** The GPU's nvidia-smi index (CUDA_VISIBLE_DEVICES, `${GPU}`); null or absent: none. */
  gpu?: number | null;
  cwd?: string;
  baseEnv?: NodeJS.ProcessEnv;
  /** Written to its stdin, which is then closed. Default: no stdin. */
  stdin?: string | Uint8Array;
  /** Abort to stop it (a cancelled batch). */
  signal?: AbortSignal;
}

export interface CommandResult {
  /** Exit code 0. */
  ok: boolean;
  code: number | null;
  signal: NodeJS.Signals | null;
  /** Classified: `exited` (with its code), `timeout`, `oom`, `signaled`, `stopped` (aborted). */
  reason: ExitReason;
  /** Its stdout, up to maxStdoutBytes. */
  stdout: Buffer;
  /** Whether stdout went on past maxStdoutBytes (the rest was read and dropped). */
  stdoutTruncated: boolean;
  /** The last lines of its stderr. */
  stderrTail: string[];
  durationMs: number;
}

/**
 * Run a per-batch command (ffmpeg, a user script) to completion under the same
 * governance as a server: its own group and cgroup, bounded output, a timeout
 * after which the group is killed. Rejects only if it cannot start (a bad
 * template, a missing program); every way it can end is a result.
 */
export async function runCommand(governor: Governor, invocation: CommandInvocation, log: Logger): Promise<CommandResult> {
  const settings = CommandSettings.parse(invocation.settings);
  const gpu = invocation.gpu ?? null;
  const variables = { GPU: gpu === null ? '' : String(gpu), ...invocation.variables };
  const prepared = prepareLaunch({ command: settings.command, env: settings.env, variables, gpu, baseEnv: invocation.baseEnv, cwd: invocation.cwd });
  const started = performance.now();
  const governed = governor.spawn({
    name: invocation.name, file: prepared.file, args: prepared.args, env: prepared.env, cwd: invocation.cwd,
    limits: settings, stdio: [invocation.stdin === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
  });
  const { clock } = governor;
  const stdout: Buffer[] = [];
  let stdoutBytes = 0;
  let stdoutTruncated = false;
  (governed.child.stdout as Readable).on('data', (chunk: Buffer) => {
    const room = settings.maxStdoutBytes - stdoutBytes;
    if (chunk.length > room) stdoutTruncated = true;
    if (room <= 0) return;
    const kept = chunk.length > room ? Buffer.from(chunk.subarray(0, room)) : chunk;
    stdout.push(kept);
    stdoutBytes += kept.length;
  });
  const stderr = new LogTail(settings.log);
  (governed.child.stderr as Readable).on('data', (chunk: Buffer) => stderr.write('err', chunk));
  if (invocation.stdin !== undefined) {
    const stdin = governed.child.stdin as Writable;
    stdin.on('error', () => { /* it exited without reading everything: its exit says why */ });
    stdin.end(invocation.stdin);
  }
  const timer = clock.setTimer(settings.timeoutMs, () => void governed.stop(settings.stopGraceMs, clock, 'timeout'));
  const abort = (): void => void governed.stop(settings.stopGraceMs, clock, 'stop');
  invocation.signal?.addEventListener('abort', abort, { once: true });
  if (invocation.signal?.aborted) abort();
  const end = await governed.ended;
  timer.cancel();
  invocation.signal?.removeEventListener('abort', abort);
  stderr.flush();
  const reason = classifyExit(end, { name: invocation.name, logTail: stderr.lines() });
  const result: CommandResult = {
    ok: reason.kind === 'exited' && end.code === 0, code: end.code, signal: end.signal, reason,
    stdout: Buffer.concat(stdout), stdoutTruncated, stderrTail: reason.logTail, durationMs: performance.now() - started,
  };
  if (!result.ok) log.info({ engine: invocation.name, pid: governed.pid, kind: reason.kind, stderrTail: reason.logTail.slice(-5) }, reason.message);
  return result;
}
