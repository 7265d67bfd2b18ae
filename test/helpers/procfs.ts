import { existsSync, readdirSync, readFileSync } from 'node:fs';

export interface ProcessInfo {
  pid: number;
  ppid: number;
  /** The command line, arguments joined by spaces. */
  cmdline: string;
}

function info(pid: number): ProcessInfo | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name is in parentheses and may hold spaces; the fields after it are plain.
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').trim();
    return { pid, ppid, cmdline };
  } catch {
    return null; // it ended while we looked
  }
}

/** The live children of a process (Linux /proc), optionally only those whose command line contains `match`. */
export function childrenOf(ppid: number, match?: string): ProcessInfo[] {
  const found: ProcessInfo[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const process = info(Number(entry));
    if (process && process.ppid === ppid && (!match || process.cmdline.includes(match))) found.push(process);
  }
  return found;
}

/** Whether a process is alive (and not a zombie). */
export function isAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

/**
 * The cgroup directories a live process is in that the agent made (their path holds `/gpumesh/`), from
 * /proc/<pid>/cgroup: one per v1 hierarchy (`/sys/fs/cgroup/<controllers><path>`), or the v2 one. Empty when the
 * process is gone or runs without cgroups.
 */
export function agentCgroupDirs(pid: number): string[] {
  let lines: string[];
  try {
    lines = readFileSync(`/proc/${pid}/cgroup`, 'utf8').trim().split('\n');
  } catch {
    return [];
  }
  const dirs: string[] = [];
  for (const line of lines) {
    const [, controllers, path] = /^\d+:([^:]*):(.*)$/.exec(line) ?? [];
    if (path === undefined || !path.includes('/gpumesh/')) continue;
    const names = controllers ? [controllers, ...controllers.split(',')] : [''];
    const candidates = controllers ? names.map((name) => `/sys/fs/cgroup/${name}${path}`) : [`/sys/fs/cgroup${path}`, `/sys/fs/cgroup/unified${path}`];
    const found = candidates.find((dir) => existsSync(dir));
    if (found) dirs.push(found);
  }
  return dirs;
}
