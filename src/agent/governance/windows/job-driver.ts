import type { CgroupLimits, ContainerDriver, ProcessContainer } from '../contract/containment.js';
import { createJobObject } from './job-object.js';

const MB = 1024 * 1024;

/** That Job Objects can be had here (koffi loads, kernel32 answers): a job made and let go. Throws why not. */
export function probeJobObjects(): void {
  const job = createJobObject({ jobMemoryBytes: null, activeProcesses: null });
  job.close();
}

/**
 * Windows' containers: a Job Object per engine process tree. Kill-on-close ties the tree to the agent — however the
 * agent ends, Windows ends the tree —, the tree's memory is limited to its model's budget, and its processes are
 * listed and counted by Windows itself. Wine (the test harness) enforces the process list, kill-on-close and
 * termination, but not memory limits: what the agent asks is in each container's `limits`, and enforcement is proven
 * on Windows only.
 */
export class JobObjectDriver implements ContainerDriver {
  readonly kind = 'job objects' as const;
  readonly description = 'job objects (kill-on-close, the tree\'s memory, its process list)';
  readonly placesBeforeStart = false;

  create(name: string, limits: CgroupLimits): ProcessContainer {
    const job = createJobObject({ jobMemoryBytes: limits.memoryLimitMB === null ? null : limits.memoryLimitMB * MB, activeProcesses: limits.pidsLimit });
    return {
      limits,
      paths: [`job ${name}`],
      place: (pid) => job.assign(pid),
      // Windows reports a job's memory-limit hits to a completion port, not as a kill: an allocation fails in the
      // process, which then ends as it will. Not counted here.
      oomKills: () => ({ kills: 0, exact: false }),
      pids: () => job.processIds(),
      memoryMB: () => {
        const bytes = job.memoryBytes();
        return bytes === null ? null : Math.round(bytes / MB);
      },
      destroy: async () => {
        job.terminate(1);
        job.close();
      },
    };
  }

  async close(): Promise<void> {
    // Every job is closed with its tree.
  }
}
