/** What a container enforces for one engine process tree (a cgroup, a Job Object). */
export interface CgroupLimits {
  memoryLimitMB: number | null;
  pidsLimit: number | null;
  cpuWeight: number;
}

/** OOM kills seen in a container. `exact` is false where the system keeps no count (old v1: only `memory.failcnt`). */
export interface OomCount {
  kills: number;
  exact: boolean;
}

/**
 * How an agent governs its engine processes on its platform — one contract, three ways (docs/architecture.md,
 * "Process governance"):
 * - `cgroup v2`, `cgroup v1`: Linux, each engine tree a process group in a cgroup of its own (memory, tasks, CPU);
 *   `process groups`: Linux where cgroups are not to be had;
 * - `job objects`: Windows, each tree in a Job Object the agent holds (kill-on-close, memory, its process list);
 * - `portable`: macOS and anywhere else (or forced: `--governance portable`), process groups with a lifeline, and
 *   memory read by polling.
 */
export type GovernanceKind = 'cgroup v2' | 'cgroup v1' | 'process groups' | 'job objects' | 'portable';

/** One engine process tree's container: a cgroup, or a Job Object. */
export interface ProcessContainer {
  readonly limits: CgroupLimits;
  /** Where it is, for logs: a cgroup's directories, or `job <name>`. */
  readonly paths: readonly string[];
  /** Move a process in. */
  place(pid: number): void;
  oomKills(): OomCount;
  /** The processes in it now. */
  pids(): number[];
  /** What its processes hold together (MB), where the container can say; null where it cannot. */
  memoryMB?(): number | null;
  /** End whatever is left in it, wait until it is empty, and let it go. */
  destroy(): Promise<void>;
}

/** A platform's way of making one container per engine process tree. */
export interface ContainerDriver {
  readonly kind: GovernanceKind;
  /** One line for the start log: what, where, with which controls. */
  readonly description: string;
  /**
   * The process must be in its container before its program runs (a cgroup charges memory where it was touched): the
   * process starts gated and is released once placed. False: placed right after it starts (a Job Object, which also
   * takes in the children it starts later).
   */
  readonly placesBeforeStart: boolean;
  create(name: string, limits: CgroupLimits): ProcessContainer;
  /** Let go of whatever the driver holds for the agent (its parent cgroup); its engines are gone by then. */
  close(): Promise<void>;
}
