import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { Backoff } from '../../../net/backoff.js';
import { sleep, workClock } from '../../../protocol/clock.js';

/**
 * Small operations on a cgroup filesystem, shared by the v1 and v2 drivers.
 * They are synchronous where the kernel answers at once (a write to a cgroup
 * file never blocks on disk) and asynchronous where they wait for processes.
 */

// The Errors here reach a job as ENGINE_FAILED through GovernedProcess.start, or the agent's log through detect.ts and the sweeps.
export function write(dir: string, file: string, value: string | number): void {
  try {
    writeFileSync(join(dir, file), String(value));
  } catch (error) {
    throw new Error(`cannot write ${value} to ${join(dir, file)}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`, { cause: error });
  }
}

/** Run a write that may fail without harm (an optional knob). */
export function attempt(write: () => void): void {
  try {
    write();
  } catch {
    // the setting is optional
  }
}

export function read(dir: string, file: string): string {
  return readFileSync(join(dir, file), 'utf8');
}

/** Whether a cgroup file exists (a controller's files appear only where it is enabled). */
export function has(dir: string, file: string): boolean {
  // Not a read: some cgroup files (cgroup.kill) are write-only.
  return existsSync(join(dir, file));
}

/** `key value` lines (memory.events, memory.oom_control, cgroup.events). */
export function readKeyed(dir: string, file: string): Map<string, number> {
  const values = new Map<string, number>();
  for (const line of read(dir, file).split('\n')) {
    const [key, value] = line.trim().split(/\s+/);
    if (key && value !== undefined) values.set(key, Number(value));
  }
  return values;
}

export function procs(dir: string): number[] {
  try {
    return read(dir, 'cgroup.procs').split('\n').filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

export function makeDirectory(dir: string): void {
  try {
    mkdirSync(dir, { recursive: true });
  } catch (error) {
    throw new Error(`cannot create ${dir}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`, { cause: error });
  }
}

function childDirectories(dir: string): string[] {
  try {
    return readdirSync(dir, { withFileTypes: true }).filter((entry) => entry.isDirectory()).map((entry) => join(dir, entry.name));
  } catch {
    return [];
  }
}

const NEVER_ABORTED = new AbortController().signal;

/** Wait the next of a backoff's delays: the kernel finishing with processes takes real time, and it is work in progress. */
export function waitNext(delays: Backoff): Promise<void> {
  return sleep(workClock, delays.next(), NEVER_ABORTED);
}

/** SIGKILL every process in the cgroup until it is empty; a process that forks while we list is caught on the next round. */
export async function killAll(dir: string, rounds = 100): Promise<void> {
  const delays = new Backoff({ initialMs: 5, maxMs: 50 });
  for (let round = 0; round < rounds; round++) {
    const pids = procs(dir);
    if (pids.length === 0) return;
    for (const pid of pids) {
      try { process.kill(pid, 'SIGKILL'); } catch { /* already gone */ }
    }
    await waitNext(delays);
  }
  throw new Error(`${dir} still holds processes ${procs(dir).join(', ')} after ${rounds} rounds of SIGKILL`);
}

/** rmdir a cgroup; the kernel answers EBUSY until its last task has finished exiting, so retry briefly. */
export async function remove(dir: string, attempts = 100): Promise<void> {
  const delays = new Backoff({ initialMs: 2, maxMs: 50 });
  for (let attempt = 0; ; attempt++) {
    try {
      rmdirSync(dir);
      return;
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return;
      if (code !== 'EBUSY' || attempt >= attempts) throw new Error(`cannot remove cgroup ${dir}: ${code}`, { cause: error });
      await waitNext(delays);
    }
  }
}

/** Remove a cgroup and everything below it, killing what runs there (a dead agent's leftovers). */
export async function removeTree(dir: string, kill: (dir: string) => Promise<void> = killAll): Promise<void> {
  for (const child of childDirectories(dir)) await removeTree(child, kill);
  await kill(dir);
  await remove(dir);
}

/** Whether a process id is alive (in this PID namespace; another user's counts: signalling it is refused, not failed). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Agent parents are named `<agent-id>.<pid>`; the ones whose agent died are removed by the next agent to start. */
export async function sweepDeadAgents(gpumeshDir: string, own: string, kill?: (dir: string) => Promise<void>): Promise<string[]> {
  const swept: string[] = [];
  for (const dir of childDirectories(gpumeshDir)) {
    const name = dir.slice(gpumeshDir.length + 1);
    const pid = Number(/\.(\d+)$/.exec(name)?.[1]);
    if (name === own || !Number.isInteger(pid) || pid <= 0 || alive(pid)) continue;
    await removeTree(dir, kill).then(() => swept.push(name), () => {});
  }
  return swept;
}

/**
 * The CPU weight (v2 scale) of the shared `gpumesh` cgroup: as much as one busy thread per CPU. A cgroup
 * competes with its sibling *threads* as one entity, so at the default weight all engines together would
 * count as one busy thread against the rest of the host — less than they had as plain processes.
 */
export function gpumeshWeight(): number {
  return Math.min(10_000, 100 * availableParallelism());
}

/** A path component from an engine or host name: letters, digits, `.`, `_`, `-`. */
export function safeName(name: string): string {
  return name.replace(/[^A-Za-z0-9._-]+/g, '_').slice(0, 64) || 'engine';
}
