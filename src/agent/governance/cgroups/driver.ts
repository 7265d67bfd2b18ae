/** What a cgroup enforces for one engine process tree. */
export interface CgroupLimits {
  memoryLimitMB: number | null;
  pidsLimit: number | null;
  cpuWeight: number;
}

/** OOM kills seen in a cgroup. `exact` is false where the kernel keeps no count (old v1: only `memory.failcnt`). */
export interface OomCount {
  kills: number;
  exact: boolean;
}

/** One engine process tree's cgroup. */
export interface ProcessCgroup {
  readonly version: 1 | 2;
  /** Its directories: one on v2; one per controller hierarchy on v1. */
  readonly paths: readonly string[];
  readonly limits: CgroupLimits;
  /** Move a process in. Memory it already used stays charged where it was, so place it before it starts its work. */
  place(pid: number): void;
  oomKills(): OomCount;
  /** The processes in it now. */
  pids(): number[];
  /** Kill whatever is left in it, wait until it is empty, remove its directories. */
  destroy(): Promise<void>;
}

/** A cgroup version's way of making per-process cgroups under the agent's own parent (`gpumesh/<agent-id>/`). */
export interface CgroupDriver {
  readonly version: 1 | 2;
  /** One line for the start log: the version, where, and which controllers. */
  readonly description: string;
  /** The agent's parent cgroup directories (`…/gpumesh/<agent-id>.<pid>`): one on v2, one per hierarchy on v1. */
  readonly parents: readonly string[];
  /** A new, empty cgroup with these limits, named `<name>-<seq>` under the agent's parent. */
  create(name: string, limits: CgroupLimits): ProcessCgroup;
  /** Remove the agent's parent (its engines are gone by then). */
  close(): Promise<void>;
}
