import { readFileSync } from 'node:fs';
import type { CgroupDriver } from './driver.js';
import { cgroupDirectory, parseMountinfo, parseOwnCgroups, type CgroupMount, type OwnCgroups } from './mountinfo.js';
import { CgroupV1Driver, type V1Controller } from './v1.js';
import { CgroupV2Driver } from './v2.js';

export interface DetectOptions {
  mode: 'auto' | 'v2' | 'v1' | 'off';
  /** v2: a delegated cgroup to use instead of the agent's own. */
  cgroupRoot: string | null;
  /** The agent's parent's name under `gpumesh/` (`<agent-id>.<pid>`). */
  agentDir: string;
  /** Where to read the mounts and the process's cgroups. Default: /proc/self/mountinfo and /proc/self/cgroup. */
  files?: { mountinfo: string; cgroup: string };
}

/** A driver, or why there is none (each version tried, with its reason). */
export type Detection = { driver: CgroupDriver; reason: null } | { driver: null; reason: string };

/**
 * What this host allows, found by trying it: cgroup v2 first (when it has the
 * memory controller), then v1, unless the config names one. Each attempt makes
 * the agent's parent cgroup and a probe leaf with limits, so "works" means the
 * writes the agent will need really succeed — root or not, container or not.
 */
export async function detectCgroups(options: DetectOptions): Promise<Detection> {
  if (options.mode === 'off') return { driver: null, reason: 'cgroups are off in the config (governance.cgroups: off)' };
  if (process.platform !== 'linux') return { driver: null, reason: `cgroups are a Linux feature (this is ${process.platform})` };
  const files = options.files ?? { mountinfo: '/proc/self/mountinfo', cgroup: '/proc/self/cgroup' };
  let mounts: CgroupMount[];
  let own: OwnCgroups;
  try {
    mounts = parseMountinfo(readFileSync(files.mountinfo, 'utf8'));
    own = parseOwnCgroups(readFileSync(files.cgroup, 'utf8'));
  } catch (error) {
    return { driver: null, reason: `cannot read ${files.mountinfo} or ${files.cgroup}: ${(error as Error).message}` };
  }
  if (mounts.length === 0) return { driver: null, reason: `no cgroup filesystem is mounted (${files.mountinfo} lists none)` };
  const failures: string[] = [];
  const notRoot = process.getuid?.() !== 0 ? ' (the agent is not root and nothing was delegated to it)' : '';
  const explain = (error: unknown): string => {
    const message = (error as Error).message;
    return /EACCES|EPERM|EROFS/.test(message) ? `${message}${notRoot}` : message;
  };

  if (options.mode !== 'v1') {
    const mount = mounts.find((candidate) => candidate.version === 2);
    if (!mount) failures.push('cgroup v2: not mounted');
    else {
      const base = options.cgroupRoot ?? cgroupDirectory(mount, own.v2 ?? '/');
      try {
        return { driver: await CgroupV2Driver.open({ base, agentDir: options.agentDir }), reason: null };
      } catch (error) {
        failures.push(`cgroup v2 at ${mount.mountPoint}: ${explain(error)}`);
      }
    }
  }
  if (options.mode !== 'v2') {
    const bases = new Map<V1Controller, string>();
    for (const controller of ['memory', 'pids', 'cpu'] as const) {
      const mount = mounts.find((candidate) => candidate.version === 1 && candidate.controllers.includes(controller));
      if (mount) bases.set(controller, cgroupDirectory(mount, own.v1.get(controller) ?? '/'));
    }
    if (!bases.has('memory')) failures.push('cgroup v1: the memory controller is not mounted');
    else {
      try {
        return { driver: await CgroupV1Driver.open({ bases, agentDir: options.agentDir }), reason: null };
      } catch (error) {
        failures.push(`cgroup v1: ${explain(error)}`);
      }
    }
  }
  return { driver: null, reason: failures.join('; ') };
}
