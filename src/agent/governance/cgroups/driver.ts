import type { CgroupLimits, ContainerDriver, ProcessContainer } from '../contract/containment.js';

export type { CgroupLimits, OomCount } from '../contract/containment.js';

/**
 * One engine process tree's cgroup: a container (containment.ts) whose `paths` are its directories — one on v2, one
 * per controller hierarchy on v1 — and whose `place` must come before the program runs (memory already touched stays
 * charged where it was), and whose `destroy` kills what is left, waits until it is empty and removes the directories.
 */
export interface ProcessCgroup extends ProcessContainer {
  readonly version: 1 | 2;
}

/** A cgroup version's way of making per-process cgroups under the agent's own parent (`gpumesh/<agent-id>/`). */
export interface CgroupDriver extends ContainerDriver {
  readonly version: 1 | 2;
  /** The agent's parent cgroup directories (`…/gpumesh/<agent-id>.<pid>`): one on v2, one per hierarchy on v1. */
  readonly parents: readonly string[];
  /** A new, empty cgroup with these limits, named `<name>-<seq>` under the agent's parent. */
  create(name: string, limits: CgroupLimits): ProcessCgroup;
}
