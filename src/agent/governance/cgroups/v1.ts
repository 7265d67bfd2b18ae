import { join } from 'node:path';
import type { CgroupDriver, CgroupLimits, OomCount, ProcessCgroup } from './driver.js';
import * as fs from './cgroupfs.js';

const MB = 1024 * 1024;
export type V1Controller = 'memory' | 'pids' | 'cpu';

export interface V1Options {
  /** Per controller, the cgroup under which `gpumesh/` is made (the agent's own cgroup in that hierarchy). */
  bases: ReadonlyMap<V1Controller, string>;
  /** The agent's parent's name under `gpumesh/` (`<agent-id>.<pid>`). */
  agentDir: string;
}

/** cgroup v1 `cpu.shares` for a v2-style weight: proportional, so the default weight 100 is the default 1024 shares. */
function sharesForWeight(weight: number): number {
  return Math.min(262_144, Math.max(2, Math.round((weight * 1024) / 100)));
}

/**
 * cgroup v1: a leaf per engine process in each of the memory, pids and cpu
 * hierarchies (the memory one is required; pids and cpu are used when
 * mounted). v1 has no `cgroup.kill`: leftovers are SIGKILLed by listing
 * `cgroup.procs` until it stays empty.
 */
export class CgroupV1Driver implements CgroupDriver {
  readonly version = 1 as const;
  readonly kind = 'cgroup v1' as const;
  readonly placesBeforeStart = true;
  readonly description: string;
  readonly parents: readonly string[];
  readonly #parents: ReadonlyMap<V1Controller, string>;
  #seq = 0;

  private constructor(parents: ReadonlyMap<V1Controller, string>, skipped: string[]) {
    this.#parents = parents;
    this.parents = [...parents.values()];
    this.description = `cgroup v1 (${[...parents].map(([controller, dir]) => `${controller} at ${dir}`).join(', ')})` +
      (skipped.length > 0 ? `; not used: ${skipped.join('; ')}` : '');
  }

  static async open(options: V1Options): Promise<CgroupV1Driver> {
    const memory = options.bases.get('memory');
    // Caught by detect.ts, which logs why the agent governs without cgroups.
    if (!memory) throw new Error('the memory controller is not mounted');
    const parents = new Map<V1Controller, string>([['memory', await makeParent(memory, options.agentDir)]]);
    const skipped: string[] = [];
    for (const controller of ['pids', 'cpu'] as const) {
      const base = options.bases.get(controller);
      if (!base) continue;
      // Limits without these are still worth having: note the reason and go on.
      try {
        parents.set(controller, await makeParent(base, options.agentDir));
      } catch (error) {
        skipped.push(`${controller}: ${(error as Error).message}`);
      }
    }
    const driver = new CgroupV1Driver(parents, skipped);
    driver.create('probe', { memoryLimitMB: 64, pidsLimit: 16, cpuWeight: 100 });
    for (const parent of parents.values()) await fs.remove(join(parent, 'probe-1'));
    return driver;
  }

  create(name: string, limits: CgroupLimits): ProcessCgroup {
    const leaf = `${fs.safeName(name)}-${++this.#seq}`;
    const dirs = new Map<V1Controller, string>();
    try {
      for (const [controller, parent] of this.#parents) {
        const dir = join(parent, leaf);
        fs.makeDirectory(dir);
        dirs.set(controller, dir);
      }
      const memory = dirs.get('memory')!;
      if (limits.memoryLimitMB !== null) {
        fs.write(memory, 'memory.limit_in_bytes', limits.memoryLimitMB * MB);
        // memory+swap equal to memory: no swap. Present only with swap accounting; it must not be below the memory limit, so it goes second.
        // Best effort: the memory limit holds without it.
        if (fs.has(memory, 'memory.memsw.limit_in_bytes')) fs.attempt(() => fs.write(memory, 'memory.memsw.limit_in_bytes', limits.memoryLimitMB! * MB));
      }
      const pids = dirs.get('pids');
      if (pids && limits.pidsLimit !== null) fs.write(pids, 'pids.max', limits.pidsLimit);
      const cpu = dirs.get('cpu');
      if (cpu) fs.write(cpu, 'cpu.shares', sharesForWeight(limits.cpuWeight));
    } catch (error) {
      for (const dir of dirs.values()) void fs.remove(dir).catch(() => {});
      throw error;
    }
    return new V1Cgroup(dirs, limits);
  }

  async close(): Promise<void> {
    for (const parent of this.#parents.values()) await fs.removeTree(parent);
  }
}

/** `<base>/gpumesh/<agent>`, fresh: dead agents' parents swept, a leftover of our own name (a dead agent with our pid) removed. */
async function makeParent(base: string, agentDir: string): Promise<string> {
  const gpumesh = join(base, 'gpumesh');
  fs.makeDirectory(gpumesh);
  if (fs.has(gpumesh, 'cpu.shares')) fs.write(gpumesh, 'cpu.shares', sharesForWeight(fs.gpumeshWeight()));
  await fs.sweepDeadAgents(gpumesh, agentDir);
  const parent = join(gpumesh, agentDir);
  await fs.removeTree(parent);
  fs.makeDirectory(parent);
  return parent;
}

class V1Cgroup implements ProcessCgroup {
  readonly version = 1 as const;
  readonly paths: readonly string[];
  readonly limits: CgroupLimits;
  readonly #memory: string;

  constructor(dirs: ReadonlyMap<V1Controller, string>, limits: CgroupLimits) {
    this.paths = [...dirs.values()];
    this.#memory = dirs.get('memory')!;
    this.limits = limits;
  }

  place(pid: number): void {
    for (const dir of this.paths) fs.write(dir, 'cgroup.procs', pid);
  }

  oomKills(): OomCount {
    try {
      const kills = fs.readKeyed(this.#memory, 'memory.oom_control').get('oom_kill');
      if (kills !== undefined) return { kills, exact: true };
      // Kernels before 4.13 count no OOM kills; hitting the limit is the best evidence there is.
      return { kills: Number(fs.read(this.#memory, 'memory.failcnt').trim()) > 0 ? 1 : 0, exact: false };
    } catch {
      return { kills: 0, exact: true };
    }
  }

  pids(): number[] {
    return [...new Set(this.paths.flatMap((dir) => fs.procs(dir)))];
  }

  async destroy(): Promise<void> {
    // Every process is in every hierarchy, so the memory one lists them all; the others are emptied by the same kills.
    for (const dir of this.paths) await fs.killAll(dir);
    for (const dir of this.paths) await fs.remove(dir);
  }
}
