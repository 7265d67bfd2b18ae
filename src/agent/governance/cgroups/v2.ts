import { join } from 'node:path';
import { Backoff } from '../../../net/backoff.js';
import type { CgroupDriver, CgroupLimits, OomCount, ProcessCgroup } from './driver.js';
import * as fs from './cgroupfs.js';

const MB = 1024 * 1024;
const WANTED = ['memory', 'pids', 'cpu'] as const;
type Controller = (typeof WANTED)[number];

export interface V2Options {
  /** The cgroup under which `gpumesh/` is made: the agent's own, or one delegated to it. */
  base: string;
  /** The agent's parent's name under `gpumesh/` (`<agent-id>.<pid>`). */
  agentDir: string;
  /** Controllers without which this driver refuses to start. Default: memory (limits and OOM reports are the point). */
  require?: readonly Controller[];
}

/**
 * cgroup v2 (the unified hierarchy): one leaf per engine process under
 * `<base>/gpumesh/<agent>/`, with the memory, pids and cpu controllers enabled
 * down the path. Leftovers are killed with `cgroup.kill` (one write kills the
 * whole tree, including processes that left their process group).
 */
export class CgroupV2Driver implements CgroupDriver {
  readonly version = 2 as const;
  readonly kind = 'cgroup v2' as const;
  readonly placesBeforeStart = true;
  readonly description: string;
  readonly parents: readonly string[];
  readonly #parent: string;
  readonly #controllers: ReadonlySet<Controller>;
  #seq = 0;

  private constructor(parent: string, controllers: ReadonlySet<Controller>) {
    this.#parent = parent;
    this.parents = [parent];
    this.#controllers = controllers;
    this.description = `cgroup v2 at ${parent} (controllers: ${[...controllers].join(', ') || 'none'})`;
  }

  /** Make the agent's parent, enable the controllers down to it, and prove a leaf with limits can be made there. */
  static async open(options: V2Options): Promise<CgroupV2Driver> {
    const required = options.require ?? ['memory'];
    const available = new Set(fs.read(options.base, 'cgroup.controllers').trim().split(/\s+/).filter(Boolean));
    const missing = required.filter((controller) => !available.has(controller));
    if (missing.length > 0) {
      // Caught by detect.ts, which logs why the agent governs without cgroups (v2.ts's other Error too).
      throw new Error(`${options.base} offers controllers [${[...available].join(', ')}], not ${missing.join(', ')}` +
        ' (bound to a cgroup v1 hierarchy, or not delegated)');
    }
    const controllers = new Set(WANTED.filter((controller) => available.has(controller)));
    enable(options.base, controllers);
    const gpumesh = join(options.base, 'gpumesh');
    fs.makeDirectory(gpumesh);
    if (controllers.has('cpu')) fs.write(gpumesh, 'cpu.weight', fs.gpumeshWeight());
    enable(gpumesh, controllers);
    await fs.sweepDeadAgents(gpumesh, options.agentDir, killTree);
    const parent = join(gpumesh, options.agentDir);
    // A parent by this name belongs to a dead agent that had our pid: ours now.
    await fs.removeTree(parent, killTree);
    fs.makeDirectory(parent);
    enable(parent, controllers);
    const driver = new CgroupV2Driver(parent, controllers);
    driver.create('probe', { memoryLimitMB: 64, pidsLimit: 16, cpuWeight: 100 });
    await fs.remove(join(parent, 'probe-1'));
    return driver;
  }

  create(name: string, limits: CgroupLimits): ProcessCgroup {
    const dir = join(this.#parent, `${fs.safeName(name)}-${++this.#seq}`);
    fs.makeDirectory(dir);
    try {
      if (this.#controllers.has('memory')) {
        fs.write(dir, 'memory.max', limits.memoryLimitMB === null ? 'max' : limits.memoryLimitMB * MB);
        // No swap: a server swapping its weights is slower than one that fails and says why.
        // Best effort, both: the memory limit holds without them.
        if (limits.memoryLimitMB !== null && fs.has(dir, 'memory.swap.max')) fs.attempt(() => fs.write(dir, 'memory.swap.max', 0));
        // One OOM kills the whole tree: a server with a dead worker is worse than a dead server.
        if (fs.has(dir, 'memory.oom.group')) fs.attempt(() => fs.write(dir, 'memory.oom.group', 1));
      }
      if (this.#controllers.has('pids')) fs.write(dir, 'pids.max', limits.pidsLimit ?? 'max');
      if (this.#controllers.has('cpu')) fs.write(dir, 'cpu.weight', limits.cpuWeight);
    } catch (error) {
      void fs.remove(dir).catch(() => {});
      throw error;
    }
    return new V2Cgroup(dir, limits);
  }

  async close(): Promise<void> {
    await fs.removeTree(this.#parent, killTree);
  }
}

class V2Cgroup implements ProcessCgroup {
  readonly version = 2 as const;
  readonly paths: readonly string[];
  readonly limits: CgroupLimits;
  readonly #dir: string;

  constructor(dir: string, limits: CgroupLimits) {
    this.#dir = dir;
    this.paths = [dir];
    this.limits = limits;
  }

  place(pid: number): void {
    fs.write(this.#dir, 'cgroup.procs', pid);
  }

  oomKills(): OomCount {
    try {
      return { kills: fs.readKeyed(this.#dir, 'memory.events').get('oom_kill') ?? 0, exact: true };
    } catch {
      return { kills: 0, exact: true };
    }
  }

  pids(): number[] {
    return fs.procs(this.#dir);
  }

  async destroy(): Promise<void> {
    await killTree(this.#dir);
    await fs.remove(this.#dir);
  }
}

function enable(dir: string, controllers: ReadonlySet<Controller>): void {
  const enabled = new Set(fs.read(dir, 'cgroup.subtree_control').trim().split(/\s+/));
  for (const controller of controllers) {
    if (enabled.has(controller)) continue;
    try {
      fs.write(dir, 'cgroup.subtree_control', `+${controller}`);
    } catch (error) {
      const busy = /EBUSY/.test((error as Error).message);
      throw new Error(busy
        ? `cannot enable ${controller} for the children of ${dir}: it holds processes itself (the no-internal-processes rule); ` +
          'run the agent in a delegated cgroup and name it in governance.cgroupRoot'
        : (error as Error).message, { cause: error });
    }
  }
}

/** `cgroup.kill` (Linux 5.14+) kills the tree at once; older kernels get the SIGKILL rounds. Then wait until it is empty. */
async function killTree(dir: string): Promise<void> {
  if (fs.has(dir, 'cgroup.kill')) {
    if (fs.procs(dir).length === 0 && !populated(dir)) return;
    fs.write(dir, 'cgroup.kill', 1);
    const delays = new Backoff({ initialMs: 2, maxMs: 20 });
    for (let round = 0; round < 200 && populated(dir); round++) await fs.waitNext(delays);
    if (!populated(dir)) return;
  }
  await fs.killAll(dir);
}

function populated(dir: string): boolean {
  try {
    return fs.readKeyed(dir, 'cgroup.events').get('populated') === 1;
  } catch {
    return false;
  }
}
