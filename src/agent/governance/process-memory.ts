/**
 * Measuring what a process really uses, for engines to report: resident
 * memory and its peak over a window (on Linux the kernel's own high-water
 * mark), and a process's GPU memory from nvidia-smi. Engines that run a
 * server or a command measure that process by pid; the ONNX worker measures itself.
 */
import { execFile, execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { findNvidiaSmi } from './executable.js';

const run = promisify(execFile);
const MB = 1024 * 1024;

export type Pid = number | 'self';

/** A `Vm*` line of /proc/<pid>/status in MB, or null where there is no procfs (not Linux) or the process is gone. */
function procStatusMB(pid: Pid, field: 'VmRSS' | 'VmHWM'): number | null {
  try {
    const line = readFileSync(`/proc/${pid}/status`, 'utf8').split('\n').find((entry) => entry.startsWith(`${field}:`));
    const kB = line ? Number.parseInt(line.slice(field.length + 1), 10) : Number.NaN;
    return Number.isFinite(kB) ? kB / 1024 : null;
  } catch {
    return null;
  }
}

/**
 * The members of a process group (`pgid`, its leader's pid), from /proc; null where there is no procfs (macOS).
 */
export function groupMembers(pgid: number): number[] | null {
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return null;
  }
  const members: number[] = [];
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      // The fields after the command, which may hold spaces and parentheses: state, ppid, pgrp, …
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]) === pgid) members.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return members;
}

/**
 * What a process group's processes hold together, in MB: their resident sets from /proc, or from `ps` where there is
 * no procfs (macOS, BSD). Null when neither can say.
 */
export function groupRssMB(pgid: number): number | null {
  const members = groupMembers(pgid);
  if (members) return Math.round(members.reduce((sum, pid) => sum + (procStatusMB(pid, 'VmRSS') ?? 0), 0));
  try {
    const table = execFileSync('ps', ['-A', '-o', 'pgid=,rss='], { encoding: 'utf8', timeout: 2000 });
    let kB = 0;
    for (const line of table.split('\n')) {
      const [group, rss] = line.trim().split(/\s+/).map(Number);
      if (group === pgid && Number.isFinite(rss)) kB += rss!;
    }
    return Math.round(kB / 1024);
  } catch {
    return null;
  }
}

/** Resident memory in MB (null if it cannot be read). */
export function rssMB(pid: Pid): number | null {
  return pid === 'self' || pid === process.pid ? process.memoryUsage.rss() / MB : procStatusMB(pid, 'VmRSS');
}

/**
 * Reset the kernel's peak-RSS mark (VmHWM) to the current RSS: writing "5" to
 * /proc/<pid>/clear_refs (Linux 4.0+; only for processes of our own user).
 * Returns false where that is not possible.
 */
export function resetPeak(pid: Pid): boolean {
  try {
    writeFileSync(`/proc/${pid}/clear_refs`, '5');
    return procStatusMB(pid, 'VmHWM') !== null;
  } catch {
    return false;
  }
}

export interface PeakWindow {
  /** RSS when the window opened. */
  startMB: number;
  /** The highest RSS inside the window. */
  peakMB: number;
  /** RSS when it closed. */
  endMB: number;
  /** How the peak was found: the kernel's exact high-water mark, or samples (a lower bound). */
  method: 'kernel' | 'samples';
}

/**
 * The peak resident memory of a process over windows (one per batch).
 *
 * Why the kernel's mark: a runtime frees its intermediate tensors before a run
 * returns, so samples taken between steps miss the very peak we want. Resetting
 * VmHWM when a window opens and reading it when it closes gives the exact
 * peak of the window. Where that is not available (not Linux), the peak is the
 * larger of the samples taken (`sample()`, e.g. between steps) and — for this
 * process — getrusage's maxrss when it grew inside the window (maxrss is a
 * lifetime mark: it only tells us about a window that set a new record).
 *
 * Windows may overlap (two batches at once in one process): the mark is reset
 * only when no window is open, so an overlapping window's peak covers the
 * earlier window's too — an overestimate, never an underestimate.
 */
export class PeakMeter {
  readonly #pid: Pid;
  readonly #kernel: boolean;
  readonly #open = new Set<{ maxSample: number }>();

  constructor(pid: Pid = 'self', options: { kernelPeak?: boolean } = {}) {
    this.#pid = pid;
    this.#kernel = (options.kernelPeak ?? true) && resetPeak(pid);
  }

  get method(): PeakWindow['method'] {
    return this.#kernel ? 'kernel' : 'samples';
  }

  /** Open a window; close it with the returned function. */
  open(): () => PeakWindow {
    if (this.#kernel && this.#open.size === 0) resetPeak(this.#pid);
    const startMB = rssMB(this.#pid) ?? 0;
    const maxRssBefore = this.#isSelf ? process.resourceUsage().maxRSS / 1024 : 0;
    const window = { maxSample: startMB };
    this.#open.add(window);
    return () => {
      this.sample();
      this.#open.delete(window);
      const endMB = rssMB(this.#pid) ?? 0;
      let peakMB = window.maxSample;
      if (this.#kernel) {
        peakMB = Math.max(peakMB, procStatusMB(this.#pid, 'VmHWM') ?? 0);
      } else if (this.#isSelf) {
        const maxRss = process.resourceUsage().maxRSS / 1024;
        if (maxRss > maxRssBefore) peakMB = Math.max(peakMB, maxRss);
      }
      return { startMB, peakMB, endMB, method: this.method };
    };
  }

  /** Note the RSS now in every open window (the fallback's only view of the peak). */
  sample(): void {
    if (this.#open.size === 0) return;
    const now = rssMB(this.#pid) ?? 0;
    for (const window of this.#open) window.maxSample = Math.max(window.maxSample, now);
  }

  get #isSelf(): boolean {
    return this.#pid === 'self' || this.#pid === process.pid;
  }
}

/** Parse `nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits`: MB of GPU memory by pid (summed over GPUs). */
export function parseComputeApps(csv: string): Map<number, number> {
  const byPid = new Map<number, number>();
  for (const line of csv.split('\n')) {
    const [pid, used] = line.split(',').map((field) => field.trim());
    const mb = Number(used);
    if (!pid || !/^\d+$/.test(pid) || !Number.isFinite(mb)) continue; // "[N/A]" and blank lines
    byPid.set(Number(pid), (byPid.get(Number(pid)) ?? 0) + mb);
  }
  return byPid;
}

/**
 * The GPU memory a process holds (MB), from nvidia-smi; null where there is no
 * nvidia-smi, it fails, or it does not list the process (it uses no GPU).
 */
export async function gpuMemoryMB(pid: number, nvidiaSmi = findNvidiaSmi()): Promise<number | null> {
  try {
    const { stdout } = await run(nvidiaSmi, ['--query-compute-apps=pid,used_memory', '--format=csv,noheader,nounits'], { timeout: 5000 });
    return parseComputeApps(stdout).get(pid) ?? null;
  } catch {
    return null;
  }
}
