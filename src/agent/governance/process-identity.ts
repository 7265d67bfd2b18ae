import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { windowsCreationTime } from './windows/process-times.js';

/**
 * A process named for good: its pid and when it started. A pid alone is not a name — the system hands it out again
 * once the process is gone (sooner on Windows; under Wine every process may even show the same one) — so what an agent
 * owns (an engine it started, a scratch folder it made) is marked with both, and a later agent ends or sweeps only what
 * still matches: never a stranger that happens to hold a recycled pid.
 */
export interface ProcessIdentity {
  pid: number;
  /** When it started, as the system says it (a token: compared, never read as a time). */
  started: string;
}

/**
 * When a process started, or null when there is no such process now. Linux: its start in clock ticks since boot,
 * with the boot's id (a pid and a tick count repeat across boots); Windows: its creation time (GetProcessTimes);
 * elsewhere: `ps -o lstart=`.
 */
export function startedAt(pid: number): string | null {
  if (process.platform === 'linux') {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      // Field 22, counted after the command (which may hold spaces and parentheses): field 3 is the first after it.
      const ticks = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
      return `${bootId()}:${ticks}`;
    } catch {
      return null;
    }
  }
  if (process.platform === 'win32') return windowsCreationTime(pid);
  try {
    return execFileSync('ps', ['-o', 'lstart=', '-p', String(pid)], { encoding: 'utf8', timeout: 2000 }).trim() || null;
  } catch {
    return null;
  }
}

/** This process, named for good. */
export function ownIdentity(): ProcessIdentity {
  return { pid: process.pid, started: startedAt(process.pid) ?? 'unknown' };
}

/** Whether the process a record names still runs: the same pid, started at the same moment. */
export function stillRuns(identity: ProcessIdentity): boolean {
  const started = startedAt(identity.pid);
  return started !== null && started === identity.started;
}

/** The identity as one word for a folder's name (`<pid>.<a hash of the start>`), and back. */
export function identityTag(identity: ProcessIdentity): string {
  let hash = 0;
  for (const char of identity.started) hash = (Math.imul(hash, 31) + char.charCodeAt(0)) >>> 0;
  return `${identity.pid}.${hash.toString(36)}`;
}

/** Whether a tag (identityTag) names a process that still runs. */
export function tagStillRuns(tag: string): boolean {
  const pid = Number(tag.split('.')[0]);
  if (!Number.isSafeInteger(pid)) return false;
  const started = startedAt(pid);
  return started !== null && identityTag({ pid, started }) === tag;
}

let boot: string | null = null;
function bootId(): string {
  if (boot === null) {
    try {
      boot = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
    } catch {
      boot = 'boot';
    }
  }
  return boot;
}
