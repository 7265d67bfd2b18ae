/**
 * CPU profiles of a process with Linux's `perf` (Debian: linux-perf), for `bench:profile --perf`. V8's own profiler
 * samples the main thread's JavaScript by wall time and gives a native call (a JSON.stringify, a SQLite step, a
 * write(2)) to whichever JS function made it, so a cheap call can read as a hot one: on the dispatch load it put
 * 2.7 % of the thread in prom-client's gauge setter, which hrtime measured at 1.25 µs a call, 14 ms over the run.
 * `perf` samples CPU time in every thread, kernel included, and names native code by its own symbols; the JIT's
 * frames are named from the map `--perf-basic-prof-only-functions` makes Node write to /tmp/perf-<pid>.map.
 */
import { execFileSync, spawn } from 'node:child_process';

/** One sample: its thread and its stack, innermost frame first (each "symbol (object)"). */
export interface PerfSample {
  tid: number;
  frames: string[];
}

/** Record `pid`'s every thread for `seconds`, at 2 kHz of CPU time, with stacks. Resolves once perf has written `out`. */
export function recordPerf(pid: number, seconds: number, out: string): Promise<void> {
  const perf = spawn('perf', ['record', '-F', '2000', '-e', 'cpu-clock', '-g', '-p', String(pid), '-o', out, '--', 'sleep', String(seconds)], { stdio: ['ignore', 'ignore', 'pipe'] });
  let errors = '';
  perf.stderr.on('data', (chunk: Buffer) => (errors += chunk.toString()));
  return new Promise((resolve, reject) => {
    perf.on('error', (error) => reject(new Error(`could not run perf (Debian: apt-get install linux-perf): ${error.message}`)));
    perf.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`perf record ended with ${code}: ${errors.trim()}`))));
  });
}

/** The samples perf recorded in `file`. */
export function perfSamples(file: string): PerfSample[] {
  const text = execFileSync('perf', ['script', '-i', file, '-F', 'tid,ip,sym,dso'], { maxBuffer: 1 << 30, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  const samples: PerfSample[] = [];
  let current: PerfSample | null = null;
  for (const line of text.split('\n')) {
    if (line.trim() === '') {
      if (current) samples.push(current);
      current = null;
    } else if (!line.startsWith('\t')) {
      // A sample's first line, its thread id (right-aligned); its frames follow, a tab before each.
      current = { tid: Number(line.trim().split(/\s+/)[0]), frames: [] };
    } else if (current) {
      // "\t    7f12ab symbol+0x1c (object)": the symbol without its offset, and the object.
      const frame = /^\s*[0-9a-f]+\s+(.*?)(?:\+0x[0-9a-f]+)?\s+\((.*)\)$/.exec(line);
      if (frame) current.frames.push(`${frame[1]} (${frame[2]})`);
    }
  }
  if (current) samples.push(current);
  return samples;
}

/**
 * Time in the kernel, by the system call it served: its handler on the stack (`__x64_sys_pwrite64`) or, where the
 * unwinder skipped it, the C library's wrapper that entered the kernel (`__libc_pwrite`, `__GI___writev`).
 */
const SYSCALLS: [string, RegExp][] = [
  ['kernel: pwrite (SQLite\'s WAL)', /pwrite/],
  ['kernel: sockets and pipes (read, write, writev, recvmsg, epoll)', /^(__x64_sys_)?(__GI___|__libc_)?(read|readv|write|writev|recvmsg|sendmsg|epoll_\w+)[ (]/],
  ['kernel: page faults', /asm_exc_page_fault/],
  ['kernel: other system calls', /__x64_sys_|^entry_SYSCALL/],
];

/** Native work named by what it is, wherever it was called from (checked from the innermost frame out). */
const NATIVE: [string, RegExp][] = [
  ['SQLite (better-sqlite3)', /better_sqlite3\.node/],
  ['V8: JSON text and number conversion', /Json(Stringif|Parse)|Dtoa|Strtod|DoubleToCString|StringToDouble|PowersOfTen/],
  ['V8: garbage collector', /Scaveng|MarkCompact|ConcurrentMarking|Sweeper|Evacuat|MinorMark|GCTracer/],
];

/**
 * Where the CPU went: a sample counts for the first native kind on its stack (from the innermost frame), else for the
 * innermost JIT frame's part of the code (`parts`: the same patterns as the V8 profile's), else for Node and V8 at large.
 * Percentages of all samples; the main thread is the one with the process's id.
 */
export function cpuByPart(samples: readonly PerfSample[], pid: number, parts: readonly [string, RegExp][]): [string, number][] {
  const totals = new Map<string, number>();
  for (const sample of samples) {
    let part = sample.tid === pid ? '' : 'other threads (GC helpers, SQLite checkpointer, libuv pool)';
    if (!part && sample.frames[0]?.endsWith('([kernel.kallsyms])')) {
      const user = sample.frames.findIndex((frame) => !frame.endsWith('([kernel.kallsyms])'));
      const entered = [sample.frames.find((frame) => frame.startsWith('__x64_sys_')), user < 0 ? undefined : sample.frames[user], sample.frames[Math.max(0, user - 1)]];
      part = SYSCALLS.find(([, pattern]) => entered.some((frame) => frame !== undefined && pattern.test(frame)))?.[0] ?? 'kernel: interrupts, scheduling';
    }
    for (const frame of sample.frames) {
      if (part) break;
      part = NATIVE.find(([, pattern]) => pattern.test(frame))?.[0] ?? '';
      if (!part && frame.startsWith('JS:')) part = parts.find(([, pattern]) => pattern.test(frame))?.[0] ?? '';
    }
    part ||= sample.frames.some((frame) => frame.startsWith('JS:')) ? 'Node internals, timers' : 'Node and V8 outside JavaScript';
    totals.set(part, (totals.get(part) ?? 0) + 1);
  }
  return [...totals].sort((a, b) => b[1] - a[1]).map(([part, count]) => [part, (count / samples.length) * 100]);
}

/** For the samples with a frame matching `what`, the nearest JS frame of ours (or of a package) that made the call. */
export function callersOf(samples: readonly PerfSample[], what: RegExp): [string, number][] {
  const callers = new Map<string, number>();
  for (const sample of samples) {
    const at = sample.frames.findIndex((frame) => what.test(frame));
    if (at < 0) continue;
    const caller = sample.frames.slice(at).find((frame) => frame.startsWith('JS:') && !/ node:/.test(frame)) ?? '(no JS caller)';
    const name = caller.replace(/^JS:[*^~]?/, '').replace(/ \(.*\)$/, '').replace(/file:\/\/\S*\/(dist|node_modules)\//, '$1/');
    callers.set(name, (callers.get(name) ?? 0) + 1);
  }
  return [...callers].sort((a, b) => b[1] - a[1]).map(([caller, count]) => [caller, (count / samples.length) * 100]);
}
