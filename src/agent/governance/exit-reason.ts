import { formatError } from '../../protocol/index.js';
import { EngineError } from '../core/engine.js';
import type { OomCount } from './cgroups/driver.js';

/** How a governed process ended, as the kernel and the agent saw it. */
export interface ProcessEnd {
  pid: number;
  code: number | null;
  signal: NodeJS.Signals | null;
  /** OOM kills in its cgroup (zero without a cgroup). */
  oom: OomCount;
  /** Its cgroup's memory limit, or null (none, or no cgroup). */
  memoryLimitMB: number | null;
  /** Why the agent stopped it, or null when it ended on its own. */
  cause: StopCause | null;
  /** What its processes held when the agent stopped it for its memory (cause `memory`), in MB. */
  heldMB?: number;
}

/**
 * Why an engine process is gone, for logs and for the error a job gets.
 * - `stopped`: the agent stopped it (stop() or idle);
 * - `exited` / `signaled`: it ended on its own with an exit code / died of a signal;
 * - `oom`: the kernel killed it for exceeding its cgroup's memory limit (or the host's memory);
 * - `timeout`: a command ran past its timeout and was killed;
 * - `not-ready`: a server did not pass its readiness check in time and was killed.
 */
export type ExitKind = 'stopped' | 'exited' | 'signaled' | 'oom' | 'timeout' | 'not-ready';

export interface ExitReason {
  kind: ExitKind;
  name: string;
  pid: number;
  code: number | null;
  signal: NodeJS.Signals | null;
  memoryLimitMB: number | null;
  /** The last lines of its stdout and stderr. */
  logTail: string[];
  /** One sentence for people. */
  message: string;
}

/**
 * Why the agent stopped it, when it did. `memory`: its processes held more than its memory limit, as the agent
 * measured them (portable governance, where no system enforces the limit).
 */
export type StopCause = 'stop' | 'idle' | 'timeout' | 'not-ready' | 'memory';

const TAIL_IN_MESSAGE = 5;

export function classifyExit(end: ProcessEnd, context: { name: string; logTail: string[]; detail?: string }): ExitReason {
  const base = { name: context.name, pid: end.pid, code: end.code, signal: end.signal, memoryLimitMB: end.memoryLimitMB, logTail: context.logTail };
  const who = `${context.name} (pid ${end.pid})`;
  const how = end.signal ? `signal ${end.signal}` : `exit code ${end.code}`;
  // An inexact count (old v1 kernels: the limit was hit) is believed only for a SIGKILL the agent did not send.
  const oom = end.oom.kills > 0 && (end.oom.exact || (end.signal === 'SIGKILL' && end.cause === null));
  if (oom) {
    const limit = end.memoryLimitMB === null
      ? 'the host ran out of memory (no cgroup memory limit was set)'
      : `exceeded its cgroup memory limit of ${end.memoryLimitMB} MB`;
    return { ...base, kind: 'oom', message: `${who} was killed by the kernel's OOM killer: ${limit}` };
  }
  switch (end.cause) {
    case 'memory': return {
      ...base, kind: 'oom',
      message: `${who} was stopped for holding more than its memory limit of ${end.memoryLimitMB} MB${end.heldMB !== undefined ? ` (${end.heldMB} MB, measured by the agent)` : ''}`,
    };
    case 'timeout': return { ...base, kind: 'timeout', message: `${who} ran past its timeout and was killed (${how})` };
    case 'not-ready': return { ...base, kind: 'not-ready', message: `${who} was stopped (${how}): ${context.detail ?? 'it did not become ready in time'}` };
    case 'idle': return { ...base, kind: 'stopped', message: `${who} was stopped after its idle time (${how})` };
    case 'stop': return { ...base, kind: 'stopped', message: `${who} was stopped (${how})` };
    default: break;
  }
  if (end.signal) return { ...base, kind: 'signaled', message: `${who} was killed by ${end.signal}` };
  const hint = end.code === 127 ? ' (command not found)' : end.code === 126 ? ' (not executable)' : '';
  return { ...base, kind: 'exited', message: `${who} exited with code ${end.code}${hint}` };
}

/** The reason with its last lines of output, for an error message. */
export function describeExit(reason: ExitReason, lines = TAIL_IN_MESSAGE): string {
  const tail = reason.logTail.slice(-lines).map((line) => (line.length > 300 ? `${line.slice(0, 300)} …` : line));
  return tail.length > 0 ? `${reason.message}; last output: ${tail.join(' | ')}` : reason.message;
}

/**
 * The engine error a job gets for this exit: ENGINE_OOM for the OOM killer,
 * ENGINE_FAILED for a server that never became ready or a command that timed
 * out, ENGINE_CRASHED otherwise. All may succeed on another replica: retryable.
 */
export function exitError(reason: ExitReason): EngineError {
  const detail = describeExit(reason);
  switch (reason.kind) {
    case 'oom': return new EngineError('ENGINE_OOM', formatError('ENGINE_OOM', { detail }));
    case 'not-ready':
    case 'timeout': return new EngineError('ENGINE_FAILED', formatError('ENGINE_FAILED', { detail }));
    default: return new EngineError('ENGINE_CRASHED', formatError('ENGINE_CRASHED', { detail }));
  }
}
